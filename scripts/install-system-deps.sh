#!/usr/bin/env bash
# The Debian/Ubuntu packages specd needs, by what needs them. Skips what is installed.
#
#   scripts/install-system-deps.sh           running specd (install.sh): PyGObject's build deps (for
#                                            pydbus), D-Bus and systemd for a user manager, a compiler
#                                            and cmake for the llama-server `specd quickstart` builds
#   scripts/install-system-deps.sh --test    also what the test suite uses (scripts/test.sh): ccache
#                                            for rebuilds, git, Prometheus (the dashboard and rules
#                                            test), Chromium and its driver (the status page test)
#   scripts/install-system-deps.sh --bench   also nginx (benchmarks/proxy_overhead.py measures beside it)
#
# Only the packages named here are installed for running specd (--no-install-recommends), and none
# of them starts a service at boot. A service that a --test or --bench package brings (prometheus,
# nginx) is disabled again right after its install, and stopped: the suite starts its own. apt's
# output goes to a log file; the terminal gets one line per step (and the log's tail on failure).
set -euo pipefail

runtime=(libgirepository1.0-dev libcairo2-dev pkg-config dbus dbus-user-session systemd
         build-essential cmake python3-venv python3-dev)
testing=(ccache git prometheus chromium chromium-driver)
bench=(nginx)
# Recommends are left out where they bring services (prometheus -> node-exporter -> smartd) or
# nothing specd uses; the test packages keep theirs: Chromium needs its fonts and GL drivers.
wanted=("${runtime[@]}")
extras=()
for arg in "$@"; do
  case "$arg" in
    --test) extras+=("${testing[@]}") ;;
    --bench) extras+=("${bench[@]}") ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "install-system-deps: unknown option '$arg' (try --help)" >&2; exit 2 ;;
  esac
done

say() { echo "install-system-deps: $*" >&2; }
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
missing_of() { local p; for p in "$@"; do installed "$p" || echo "$p"; done; }

mapfile -t missing_runtime < <(missing_of "${wanted[@]}")
mapfile -t missing_extras < <(missing_of "${extras[@]}")
if [ ${#missing_runtime[@]} -eq 0 ] && [ ${#missing_extras[@]} -eq 0 ]; then
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || {
    say "need root (or sudo) to install: ${missing_runtime[*]} ${missing_extras[*]}"; exit 1; }
  sudo=sudo
fi
log="$(mktemp "${TMPDIR:-/tmp}/specd-apt.XXXXXX")"
export DEBIAN_FRONTEND=noninteractive

# apt-get install PACKAGES... [apt options], its output in the log; the package lists are refreshed
# once if the first try cannot find a package.
apt_install() {
  local options=("$@")
  if ! $sudo apt-get install -y -q -o Dpkg::Use-Pty=0 "${options[@]}" >>"$log" 2>&1; then
    say "refreshing the package lists (apt-get update)"
    if ! { $sudo apt-get update -q >>"$log" 2>&1 && \
           $sudo apt-get install -y -q -o Dpkg::Use-Pty=0 "${options[@]}" >>"$log" 2>&1; }; then
      say "apt-get failed; the last lines of $log:"
      tail -n 20 "$log" >&2
      exit 1
    fi
  fi
}

if [ ${#missing_runtime[@]} -gt 0 ]; then
  say "installing ${missing_runtime[*]} (apt's output: $log)"
  apt_install --no-install-recommends "${missing_runtime[@]}"
fi
if [ ${#missing_extras[@]} -gt 0 ]; then
  say "installing, for the tests: ${missing_extras[*]} (apt's output: $log)"
  apt_install "${missing_extras[@]}"
  # What these packages enabled at boot (they were not installed before): disable and stop it again.
  units=()
  for package in "${missing_extras[@]}"; do
    while IFS= read -r path; do
      units+=("$(basename "$path")")
    done < <(dpkg -L "$package" 2>/dev/null | grep -E '^(/usr)?/lib/systemd/system/[^/@]+\.(service|socket|timer)$' || true)
  done
  # Where systemd is not PID 1 (containers) systemctl edits the links offline, and has nothing to stop.
  offline=()
  [ "$(cat /proc/1/comm 2>/dev/null)" = systemd ] || offline=(env SYSTEMD_OFFLINE=1)
  for unit in "${units[@]}"; do
    now=(--now)
    [ ${#offline[@]} -eq 0 ] || now=()
    if $sudo "${offline[@]}" systemctl --quiet disable "${now[@]}" "$unit" >>"$log" 2>&1; then
      say "not started at boot: $unit (its package enables it; the tests start their own)"
    else
      say "could not disable $unit (see $log): \`systemctl disable --now $unit\` does it"
    fi
  done
fi
say "done"
