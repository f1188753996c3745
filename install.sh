#!/usr/bin/env bash
# Install specd on a Debian/Ubuntu box: system packages, a venv, `specd` on the PATH, and the
# specd daemon's user unit. Safe to run twice.
#
#   ./install.sh            then: ~/.local/bin/specd quickstart
#
# SPECD_HOME (default ~/.local/share/specd) holds the venv.
set -euo pipefail
repo="$(cd "$(dirname "$0")" && pwd)"
specd_home="${SPECD_HOME:-$HOME/.local/share/specd}"
venv="$specd_home/venv"
bin_dir="$HOME/.local/bin"
say() { echo "install: $*"; }

say "files written outside $repo: $venv, $bin_dir/specd, the daemon's user unit under ~/.config/systemd/user"
say "(and /usr/local/bin/specd when that directory is writable); system packages come from apt"
"$repo/scripts/install-system-deps.sh"

if [ ! -x "$venv/bin/python" ]; then
  say "creating $venv"
  mkdir -p "$specd_home"
  python3 -m venv "$venv"
fi
say "installing specd and its dependencies into $venv (PyGObject builds from source: about a minute)"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e "$repo"

mkdir -p "$bin_dir"
ln -sfn "$venv/bin/specd" "$bin_dir/specd"
say "specd -> $bin_dir/specd"
if [ -w /usr/local/bin ] && [ ! -e /usr/local/bin/specd -o -L /usr/local/bin/specd ]; then
  ln -sfn "$venv/bin/specd" /usr/local/bin/specd
  say "specd -> /usr/local/bin/specd (also: /usr/local/bin is writable here, so every user's PATH finds it)"
fi
case ":$PATH:" in
  *":$bin_dir:"*) ;;
  *) command -v specd >/dev/null || say "add $bin_dir to your PATH (e.g. in ~/.profile) to type plain 'specd'" ;;
esac

unit_dir="${XDG_CONFIG_HOME:-$HOME/.config}/systemd/user"
mkdir -p "$unit_dir"
install -m 0644 "$repo/units/specd.service" "$unit_dir/specd.service"
say "daemon unit -> $unit_dir/specd.service"
if systemctl --user is-system-running >/dev/null 2>&1 || \
   [ "$(systemctl --user is-system-running 2>/dev/null)" = degraded ]; then
  systemctl --user daemon-reload
  systemctl --user enable specd.service >/dev/null 2>&1 && say "enabled specd.service (start it with: systemctl --user start specd)"
  if command -v loginctl >/dev/null && ! loginctl show-user "$(id -un)" -p Linger 2>/dev/null | grep -q yes; then
    say "so the daemon and llama-server survive logout: sudo loginctl enable-linger $(id -un)"
  fi
else
  say "no systemd --user manager answers in this shell: enable the daemon later with"
  say "  systemctl --user daemon-reload && systemctl --user enable --now specd.service"
  say "  (and sudo loginctl enable-linger $(id -un))"
fi
say "done. Next: $bin_dir/specd quickstart   (builds llama-server + a tiny model, then switches for real)"
