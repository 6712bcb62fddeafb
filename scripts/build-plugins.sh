#!/usr/bin/env bash
# Builds every configurator plugin into host/plugin/builtin/wasm/<kind>.wasm
# (embedded into the kvhost binary) and every hostile test plugin into
# host/plugin/testdata/wasm/hostile-<name>.wasm (used by tests only).
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
for dir in plugins/hostile/*/; do
	name="$(basename "$dir")"
	[ -f "$dir/main.go" ] || continue
	build "$hostile/hostile-$name.wasm" "./plugins/hostile/$name"
done
