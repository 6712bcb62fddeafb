#!/usr/bin/env bash
# Builds every configurator plugin into host/plugin/builtin/wasm/<kind>.wasm
# and every output-constraint plugin plugins/constraint-<name> into
# host/constraint/builtin/wasm/<name>.wasm (both embedded into the kvhost
# binary), and every hostile test plugin into
# host/plugin/testdata/wasm/hostile-<name>.wasm or, for the constraint
# kind, host/constraint/testdata/wasm/hostile-constraint.wasm (tests only).
# Run from anywhere; uses the repository's go toolchain.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
builtin="host/plugin/builtin/wasm"
hostile="host/plugin/testdata/wasm"
mkdir -p "$builtin" "$hostile"
build() { # build OUT PKG
	GOOS=wasip1 GOARCH=wasm go build -trimpath -buildmode=c-shared -o "$1" "$2"
	echo "built $1 ($(wc -c <"$1") bytes)"
}
for dir in configurators/*/; do
	kind="$(basename "$dir")"
	[ -f "$dir/main.go" ] || continue
	build "$builtin/$kind.wasm" "./configurators/$kind"
done
# Output-constraint plugins (Go, wasip1) into host/constraint/builtin/wasm.
constraints="host/constraint/builtin/wasm"
mkdir -p "$constraints" host/constraint/testdata/wasm
for dir in plugins/constraint-*/; do
	[ -f "$dir/main.go" ] || continue
	build "$constraints/$(basename "$dir" | sed 's/^constraint-//').wasm" "./$dir"
done
build host/constraint/testdata/wasm/hostile-constraint.wasm ./plugins/hostile/constraint
for dir in plugins/hostile/*/; do
	name="$(basename "$dir")"
	[ -f "$dir/main.go" ] && [ "$name" != constraint ] || continue
	build "$hostile/hostile-$name.wasm" "./plugins/hostile/$name"
done
# The configurators' descriptors, taken now so a first start interprets only
# the claimant (host/plugin/described.go), and the built-ins' sums.
go run ./scripts/describe-builtins "$builtin"
scripts/sum-builtins.sh
