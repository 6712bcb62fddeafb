#!/usr/bin/env bash
# Builds every C sampler plugin plugins/<name>/<name>.c into
# host/plugin/builtin/wasm/<name>.wasm (embedded into the kvhost binary with
# the configurators),
# and the C test samplers host/sampling/testdata/c/<name>.c into
# host/sampling/testdata/wasm/<name>.wasm (used by tests only).
# Needs scripts/install-wasm-toolchain.sh. Run from anywhere.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
CC="${CC_WASM:-clang}"
if ! command -v "$CC" >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
	echo "build-samplers: $CC not found; installing the wasm toolchain (scripts/install-wasm-toolchain.sh)" >&2
	scripts/install-wasm-toolchain.sh || true
fi
if ! command -v "$CC" >/dev/null 2>&1; then
	# kvhost still builds and runs: requests then use the host-native
	# sampler, and naming a policy plugin gets a 400. Tests that need the
	# policies fail with a message pointing here.
	echo "build-samplers: WARNING: $CC not found, sampling policy plugins not built; run scripts/install-wasm-toolchain.sh" >&2
	scripts/sum-builtins.sh
	exit 0
fi
flags=(--target=wasm32-wasi -mexec-model=reactor -O2 -Wall -Werror -Wno-unused-function
	-I sdk/sampler/c -Wl,--strip-all -Wl,-z,stack-size=65536)
build() { # build OUT SRC
	"$CC" "${flags[@]}" -o "$1.tmp" "$2" -lm
	mv "$1.tmp" "$1"
	echo "built $1 ($(wc -c <"$1") bytes)"
}
builtin="host/plugin/builtin/wasm"
testout="host/sampling/testdata/wasm"
mkdir -p "$builtin" "$testout"
for dir in plugins/*/; do
	name="$(basename "$dir")"
	[ -f "$dir/$name.c" ] || continue
	build "$builtin/$name.wasm" "$dir/$name.c"
done
for src in host/sampling/testdata/c/*.c; do
	[ -f "$src" ] || continue
	build "$testout/$(basename "$src" .c).wasm" "$src"
done
scripts/sum-builtins.sh
