#!/usr/bin/env bash
# Runs `kvhost gpu-check` on a GPU machine. That machine has no Go toolchain:
# build the binary beforehand with `make build-cuda` (bin/kvhost-cuda) and
# carry the checkout. Usage: scripts/gpu-check.sh OUTDIR [extra gpu-check flags]
# Writes OUTDIR/report.json, OUTDIR/report.md and OUTDIR/gpu-check.log;
# finishes in a few minutes (hard limit 290 s). The Llama-3-8B-shaped bf16
# model (~16 GB) is generated into OUTDIR/tmp and deleted afterwards; it is
# skipped, with the reason in the report, when the GPU has < 24 GiB free.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-gpu-check-out}"
shift || true
mkdir -p "$out"
bin="${KVHOST_CUDA_BIN:-$root/bin/kvhost-cuda}"
[ -f "$bin" ] || { echo "gpu-check: $bin missing (run make build-cuda here and carry it)" >&2; exit 1; }
if [ ! -x "$bin" ]; then
	# A carried copy may lose its mode bits (or lie on a read-only tree).
	chmod +x "$bin" 2>/dev/null || { cp "$bin" "$out/kvhost-cuda" && chmod +x "$out/kvhost-cuda" && bin="$out/kvhost-cuda"; }
fi
{
	echo "== machine"; uname -a; ldd --version 2>&1 | head -1
	timeout 20 nvidia-smi 2>&1 | head -20
	echo "== binary"; ldd "$bin" 2>&1
	echo "== cublas"; ldconfig -p 2>/dev/null | grep -i cublas
	timeout 20 find / -xdev -name 'libcublas*.so*' 2>/dev/null | head -20
} >"$out/machine.txt" 2>&1
# ../shared beside the checkout, shared/ inside it, or models/ (an ignored
# folder a session can carry to the GPU machine with the binary).
model="$root/../shared/models/stories260K.gguf"
[ -f "$model" ] || model="$root/shared/models/stories260K.gguf"
[ -f "$model" ] || model="$root/models/stories260K.gguf"
[ -f "$model" ] || echo "gpu-check: warning: stories260K.gguf not found beside or inside the checkout; its greedy and boot sections will fail" >&2
timeout 290 "$bin" gpu-check --out "$out" --model "$model" "$@" 2>&1 | tee "$out/gpu-check.log"
rc=${PIPESTATUS[0]}
# Killed by the time limit, the binary cannot delete the generated ~16 GB
# model; never leave it in the output directory.
rm -rf "$out/tmp"
[ "$rc" = 124 ] && echo "gpu-check: stopped after 290 s; report.json holds the sections finished before that, see $out/gpu-check.log"
echo "gpu-check: exit $rc; report in $out/report.md"
exit "$rc"
