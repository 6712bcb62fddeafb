#!/usr/bin/env bash
# Installs Debian's Chromium for the dashboard's end-to-end tests (web/,
# driven from Go with chromedp). Idempotent: does nothing when a chromium
# binary is already on PATH. Needs root (or sudo) and Debian's package mirror.
set -euo pipefail
for b in chromium chromium-browser google-chrome; do
  if command -v "$b" >/dev/null 2>&1; then
    echo "install-chromium: $b already installed: $("$b" --version 2>/dev/null || true)"
    exit 0
  fi
done
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends chromium fonts-dejavu-core
chromium --version
