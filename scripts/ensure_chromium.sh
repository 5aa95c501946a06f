#!/usr/bin/env bash
# Installs Debian's Chromium and ChromeDriver for MiniWoB++ when they are missing (as root),
# or says exactly what to install.
set -euo pipefail
chrome="${MINIWOB_CHROME_BINARY:-/usr/bin/chromium}"
driver="${MINIWOB_CHROMEDRIVER:-/usr/bin/chromedriver}"
if [ -x "$chrome" ] && [ -x "$driver" ]; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "Installing chromium and chromium-driver (Debian packages) for MiniWoB++ ..."
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq chromium chromium-driver >/dev/null
  exit 0
fi
cat >&2 <<MSG
ADMIRE needs Chromium and ChromeDriver for MiniWoB++, and they are missing:
  browser: $chrome
  driver:  $driver
Install them (Debian/Ubuntu):  sudo apt-get install -y chromium chromium-driver
or point MINIWOB_CHROME_BINARY and MINIWOB_CHROMEDRIVER at an existing pair of the same version.
MSG
exit 1
