#!/usr/bin/env bash
# Install specd on a Debian/Ubuntu box: system packages, a venv, `specd` on the PATH, and the
# specd daemon's user unit. Safe to run twice.
#
#   ./install.sh            then: ~/.local/bin/specd quickstart
#
# SPECD_HOME (default ~/.local/share/specd) holds the venv. SPECD_SYSTEM_BIN (default /usr/local/bin;
# empty: none) gets a `specd` link too when it is writable, so every user's PATH finds it.
# Nothing is enabled or started: the apt packages are those running specd needs (no test tools, no
# services), and the daemon's unit waits until specd.toml names what it should guard.
set -euo pipefail
repo="$(cd "$(dirname "$0")" && pwd)"
specd_home="${SPECD_HOME:-$HOME/.local/share/specd}"
venv="$specd_home/venv"
bin_dir="$HOME/.local/bin"
doc_dir="$HOME/.local/share/doc/specd"  # what specd.service's Documentation= names
system_bin="${SPECD_SYSTEM_BIN-/usr/local/bin}"
say() { echo "install: $*"; }

say "files written outside $repo: $venv, $bin_dir/specd, the daemon's user unit under ~/.config/systemd/user,"
also=""
[ -z "$system_bin" ] || also=" (and $system_bin/specd when that directory is writable)"
say "this README under $doc_dir$also;"
say "system packages come from apt: only what running specd needs (the test suite's come with scripts/test.sh)"
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
if [ -n "$system_bin" ] && [ -w "$system_bin" ] && { [ ! -e "$system_bin/specd" ] || [ -L "$system_bin/specd" ]; }; then
  ln -sfn "$venv/bin/specd" "$system_bin/specd"
  say "specd -> $system_bin/specd (also: $system_bin is writable here, so every user's PATH finds it)"
fi
case ":$PATH:" in
  *":$bin_dir:"*) ;;
  *) command -v specd >/dev/null || say "add $bin_dir to your PATH (e.g. in ~/.profile) to type plain 'specd'" ;;
esac

unit_dir="${XDG_CONFIG_HOME:-$HOME/.config}/systemd/user"
mkdir -p "$unit_dir" "$doc_dir/docs"
install -m 0644 "$repo/units/specd.service" "$unit_dir/specd.service"
install -m 0644 "$repo/README.md" "$doc_dir/README.md"
install -m 0644 "$repo"/docs/*.md "$doc_dir/docs/"
say "daemon unit -> $unit_dir/specd.service (documentation: $doc_dir/README.md)"
# Nothing is enabled or started: the daemon guards what specd.toml names, which does not exist yet.
say "the daemon is not enabled; once specd.toml has your deployment (README, step 5):"
if systemctl --user is-system-running >/dev/null 2>&1 || \
   [ "$(systemctl --user is-system-running 2>/dev/null)" = degraded ]; then
  systemctl --user daemon-reload
  say "  systemctl --user enable --now specd.service"
  if command -v loginctl >/dev/null && ! loginctl show-user "$(id -un)" -p Linger 2>/dev/null | grep -q yes; then
    say "  and, so the daemon and llama-server survive logout: sudo loginctl enable-linger $(id -un)"
  fi
else
  say "  systemctl --user daemon-reload && systemctl --user enable --now specd.service"
  say "  (no systemd --user manager answers in this shell; \`specd quickstart\` starts a private one for its demo)"
fi
say "done. Next: $bin_dir/specd quickstart   (builds llama-server + a tiny model, then switches for real)"
