#!/usr/bin/env bash
# A new user's first hour, replayed: a clean clone, an empty HOME, no user bus, the README's first
# line, then what the first-hour runs did (benchmarks/results/first-hour.md; issue 37's list).
#
#   benchmarks/first_hour.sh [COMMIT] [OUT_DIR]        (default: HEAD, /tmp/first-hour-<time>)
#
# Every step's output goes to OUT_DIR/NN-step.log with its command, wall time and exit status;
# OUT_DIR/steps.tsv lists them (step, seconds, exit, command). Nothing is judged here: read the
# logs and write the run up in first-hour.md. The clone and the empty HOME live under OUT_DIR; the
# private systemd that quickstart starts is stopped at the end (`specd quickstart --stop`).
# SPECD_SYSTEM_BIN is set empty so that install.sh leaves /usr/local/bin of this shared box alone
# (a user would get a link there when it is writable; nothing else differs). The proxy listens on a
# free port, not the README's 8080, which something else on a shared box may hold.
# FIRST_HOUR_REUSE_CACHE=1 links this account's llama-server build, model and pip cache into the fresh HOME:
# for trying the script out in minutes, not for a run on record (that one builds, as a user does).
set -uo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
commit="$(git -C "$repo" rev-parse --verify "${1:-HEAD}^{commit}")" || exit 1  # here: a worktree's HEAD is its branch's
out="${2:-/tmp/first-hour-$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
home="$out/home"
clone="$out/specd"
mkdir -p "$home"
if [ "${FIRST_HOUR_REUSE_CACHE:-0}" = 1 ]; then
  mkdir -p "$home/.cache/specd"
  for part in llama-server models sdist; do ln -s "$HOME/.cache/specd/$part" "$home/.cache/specd/$part"; done
  [ -d "$HOME/.cache/pip" ] && ln -s "$HOME/.cache/pip" "$home/.cache/pip"  # wheels pip built before (PyGObject)
fi
proxy_port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
git clone -q "$repo" "$clone" && git -C "$clone" checkout -q "$commit" || { echo "cannot clone $repo at $commit" >&2; exit 1; }
printf 'step\tseconds\texit\tcommand\n' >"$out/steps.tsv"
{
  echo "commit: $(git -C "$clone" rev-parse --short HEAD)"
  echo "date: $(date -u +%FT%TZ)"
  echo "machine: $(uname -a); $(nproc) cores; $(free -g | awk '/Mem:/{print $2}') GiB"
  echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$out/machine.txt"

number=0
# step NAME COMMAND...: run it in the fresh account's environment (bash -c, in the clone), logged.
step() {
  local name="$1" started ended status log seconds
  shift
  number=$((number + 1))
  log="$out/$(printf %02d "$number")-$name.log"
  echo "== $name: $*" | tee "$log" >&2
  started=$(date +%s.%N)
  env -i HOME="$home" PATH="$home/.local/bin:/usr/local/bin:/usr/bin:/bin" LANG=C.UTF-8 TERM=dumb \
    SPECD_SYSTEM_BIN="" COLUMNS="${COLUMNS_FOR_STEP:-80}" bash -c "cd '$clone' && $*" >>"$log" 2>&1
  status=$?
  ended=$(date +%s.%N)
  seconds="$(awk "BEGIN { printf \"%.2f\", $ended - $started }")"
  printf '%s\t%s\t%s\t%s\n' "$name" "$seconds" "$status" "$*" >>"$out/steps.tsv"
  echo "   exit $status, $seconds s (log: $log)" >&2
}
env_sh="$home/.local/state/specd/quickstart-systemd/env.sh"
with_bus="source '$env_sh' &&"
config="$home/.config/specd"
profiles="$config/profiles/tiny"

# The README's first line.
step install './install.sh'
step quickstart '~/.local/bin/specd quickstart'
# A new shell that did not source env.sh (items 6, 15, 4, 5, 3).
step status-new-shell 'specd status'
step help 'specd --help'
step profiles 'specd profiles'
step history-80-columns 'specd history'
step doctor-80-columns 'specd doctor'
step switch-without-env 'specd switch ngram-mod'
# With the bus: the walk back (item 7) and what a switch says (item 3).
step switch-ngram-mod "$with_bus specd switch ngram-mod"
step switch-ngram-simple "$with_bus specd switch ngram-simple"
step rollback-1 "$with_bus specd rollback"
step switch-autoregressive "$with_bus specd switch autoregressive"
step rollback-2 "$with_bus specd rollback"
step rollback-3 "$with_bus specd rollback"
step rollback-4 "$with_bus specd rollback"
step history-after-walk "$with_bus specd history"
# Bad input (items 10, 15, 11).
step missing-model "printf 'inherits = \"autoregressive\"\nmodel = \"/models/does-not-exist.gguf\"\n' >'$profiles/missing.toml' && $with_bus specd switch missing"
step typo "$with_bus specd switch ngram-mdo"
step truncated-gguf "model=\$(ls ~/.cache/specd/models/gemma-3-270m-q4_k_m.gguf) && head -c \$((\$(stat -c %s \"\$model\") / 2)) \"\$model\" >'$out/truncated.gguf' && printf 'inherits = \"autoregressive\"\nmodel = \"$out/truncated.gguf\"\nhealth_timeout_s = 30\n' >'$profiles/truncated.toml' && $with_bus specd switch truncated"
step status-after-revert "$with_bus specd status"
# The daemon and the proxy (README step 5; items 12, 8, 13).
step proxy-config "printf '\n[proxy]\nlisten = \"127.0.0.1:$proxy_port\"\n' >>'$config/specd.toml' && cat '$config/specd.toml'"
step daemon-start "$with_bus systemctl --user daemon-reload && systemctl --user enable --now specd.service && sleep 5 && systemctl --user status specd.service --no-pager"
step status-with-proxy "$with_bus specd status"
step blue-green "$with_bus specd switch --strategy blue-green ngram-simple"
step through-proxy "curl -s http://127.0.0.1:$proxy_port/v1/completions -H 'Content-Type: application/json' -d '{\"model\":\"tiny\",\"prompt\":\"The capital of France is\",\"max_tokens\":8,\"temperature\":0}'"
step unit-documentation "$with_bus systemctl --user show specd.service -p Documentation && ls -l ~/.local/share/doc/specd/README.md && head -3 ~/.config/systemd/user/llama-server-tiny*.service"
# The tuner's dry run (item 9, the tuner helper's): history before and after.
step generations-before-dry-run "$with_bus specd history --json | grep -c '\"id\"'"
step tune-dry-run "$with_bus specd tune --dry-run -w code --n 4 --max-tokens 32 -p autoregressive -p ngram-simple 2>&1 | cat"
step generations-after-dry-run "$with_bus specd history --json | grep -c '\"id\"'"
step rollback-after-dry-run "$with_bus specd rollback"
# Start-up of the commands themselves (item 15), five of each.
step startup-times "for i in 1 2 3 4 5; do /usr/bin/time -f '--help %e s' specd --help >/dev/null; done; for i in 1 2 3 4 5; do source '$env_sh' && /usr/bin/time -f 'status %e s' specd status >/dev/null; done"
step stop "$with_bus systemctl --user disable --now specd.service; ~/.local/bin/specd quickstart --stop"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/machine.txt"
echo "done: $out/steps.tsv" >&2
