#!/usr/bin/env bash
# Debian/Ubuntu packages specd needs: PyGObject's build deps (for pydbus), D-Bus with the
# systemd --user integration, a compiler and cmake for llama-server, Prometheus (prometheus, promtool)
# for the dashboard and rules test, Chromium and its driver for the status page test, nginx
# (benchmarks/proxy_overhead.py measures the proxy beside it). Skips what is installed.
set -euo pipefail
packages=(libgirepository1.0-dev libcairo2-dev pkg-config dbus dbus-user-session systemd
          build-essential cmake ccache python3-venv python3-dev git prometheus chromium chromium-driver nginx)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
[ ${#missing[@]} -eq 0 ] && exit 0
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-system-deps: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  sudo=sudo
fi
echo "install-system-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get install -y -q "${missing[@]}" >&2 || { $sudo apt-get update -q >&2 && $sudo apt-get install -y -q "${missing[@]}" >&2; }
