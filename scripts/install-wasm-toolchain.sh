#!/usr/bin/env bash
# Installs the toolchain that builds the C sampler plugins (plugins/*/ with a
# .c file): Debian's clang and lld, wasi-libc and the wasm32 compiler-rt
# builtins. Idempotent: does nothing (quietly) when everything is present.
# Needs root (or sudo) and the Debian package mirror the first time.
set -euo pipefail
pkgs=(clang lld wasi-libc libclang-rt-14-dev-wasm32)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "install-wasm-toolchain: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq -o DPkg::Lock::Timeout=600
$sudo apt-get install -y -qq -o DPkg::Lock::Timeout=600 "${pkgs[@]}" >/dev/null
