#!/usr/bin/env bash
# Installs the CUDA 11.8 toolkit (nvcc, cuda.h, libcuda stub) from Debian's
# contrib/non-free archive, which the `cuda` build tag needs at build time.
# The sources entry is derived from the existing debian.sources by rewriting
# its Components: line, so no archive host name is written here. Idempotent:
# rerunning rewrites the same entry and apt-get finds everything installed.
set -euo pipefail
src=/etc/apt/sources.list.d/debian.sources
dst=/etc/apt/sources.list.d/debian-nonfree.sources
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
if command -v nvcc >/dev/null 2>&1 && [ -e /usr/include/cuda.h ] && ldconfig -p | grep -q 'libcuda.so.1'; then
	echo "install-cuda: toolkit already present ($(nvcc --version | tail -1))"
	exit 0
fi
[ -r "$src" ] || { echo "install-cuda: $src not found" >&2; exit 1; }
tmp="$(mktemp)"
trap 'rm -f "$tmp"' EXIT
sed -E 's/^Components:.*/Components: contrib non-free/' "$src" >"$tmp"
$sudo install -m 0644 "$tmp" "$dst"
$sudo apt-get update
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y nvidia-cuda-toolkit libcuda1
nvcc --version | tail -1
