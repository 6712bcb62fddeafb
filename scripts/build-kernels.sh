#!/usr/bin/env bash
# Regenerates the committed CUDA kernel artifacts in kernels/cuda from the
# .cu sources with nvcc (CUDA 11.8, see scripts/install-cuda.sh):
#   <module>.sm_80.ptx, <module>.sm_90.ptx   PTX for compute_80 / compute_90
#   <module>.fatbin                          sm_80 + sm_90 cubins, compute_90 PTX
#   kernels.sum                              sha256 of the sources, nvcc release, flags
# Usage: scripts/build-kernels.sh            regenerate in place
#        scripts/build-kernels.sh --check    rebuild into a temp dir, fail on drift
#        scripts/build-kernels.sh OUTDIR     generate into OUTDIR
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="$root/kernels/cuda"
NVCC="${NVCC:-nvcc}"
FLAGS=(-O3 -std=c++14)
check=0
out="$src"
case "${1:-}" in
--check) check=1; out="$(mktemp -d)"; trap 'rm -rf "$out"' EXIT ;;
"") ;;
*) out="$1"; mkdir -p "$out" ;;
esac
command -v "$NVCC" >/dev/null || { echo "build-kernels: $NVCC not found (run scripts/install-cuda.sh)" >&2; exit 1; }
release="$("$NVCC" --version | grep -o 'release [0-9.]*' | head -1)"
# CUDA 11.8 refuses gcc newer than 11. Where the default gcc is newer, hand
# nvcc a host compiler it accepts (NVCC_CCBIN, else clang-14): only device
# code reaches the PTX and cubins, so the artifacts (and kernels.sum) do
# not change.
HOSTCC=()
if [ -n "${NVCC_CCBIN:-}" ]; then
	HOSTCC=(-ccbin "$NVCC_CCBIN")
elif [ "$(gcc -dumpversion 2>/dev/null | cut -d. -f1)" -gt 11 ] 2>/dev/null && command -v clang-14 >/dev/null; then
	HOSTCC=(-ccbin clang-14)
fi
cd "$src" # relative paths only, so nothing machine-specific lands in the output
for cu in *.cu; do
	mod="${cu%.cu}"
	for sm in 80 90; do
		"$NVCC" "${FLAGS[@]}" "${HOSTCC[@]}" -ptx -arch=compute_$sm -o "$out/$mod.sm_$sm.ptx" "$cu"
	done
	"$NVCC" "${FLAGS[@]}" "${HOSTCC[@]}" -fatbin \
		-gencode arch=compute_80,code=sm_80 \
		-gencode arch=compute_90,code='[sm_90,compute_90]' \
		-o "$out/$mod.fatbin" "$cu"
done
{
	echo "# nvcc $release; flags: ${FLAGS[*]}; ptx: compute_80 compute_90; fatbin: sm_80 sm_90 compute_90"
	sha256sum -- *.cu *.cuh
} >"$out/kernels.sum"
if [ "$check" = 1 ]; then
	status=0
	for f in "$out"/*; do
		name="$(basename "$f")"
		if ! cmp -s "$f" "$src/$name"; then
			echo "build-kernels: kernels/cuda/$name differs from a fresh build (run make kernels)" >&2
			status=1
		fi
	done
	for f in "$src"/*.ptx "$src"/*.fatbin; do
		[ -e "$f" ] || continue
		[ -e "$out/$(basename "$f")" ] || { echo "build-kernels: kernels/cuda/$(basename "$f") has no source" >&2; status=1; }
	done
	[ "$status" = 0 ] && echo "build-kernels: committed kernels match the sources"
	exit "$status"
fi
echo "build-kernels: wrote $(ls "$out"/*.ptx | wc -l) ptx and $(ls "$out"/*.fatbin | wc -l) fatbin files to $out"
