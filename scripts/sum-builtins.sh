#!/usr/bin/env bash
# Writes host/plugin/builtin/wasm/SHA256SUMS (sha256sum's format) for the
# built-in plugins embedded there. The registry keys their records and
# recalled answers by these sums, so a warm start never reads (and never
# pages in) the embedded modules to hash them; a built-in's bytes are
# checked against its sum whenever they are read. build-plugins.sh and
# build-samplers.sh run it last, so the sums always match what is embedded
# (host/plugin/builtin's TestSumsMatchTheBytes checks).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root/host/plugin/builtin/wasm"
shopt -s nullglob
files=(*.wasm)
if [ ${#files[@]} -eq 0 ]; then
	rm -f SHA256SUMS
	exit 0
fi
sha256sum -- "${files[@]}" >SHA256SUMS.tmp
mv SHA256SUMS.tmp SHA256SUMS
