#!/usr/bin/env bash
# Run specd's whole test suite on a fresh machine: installs the system packages the tests use
# (scripts/install-system-deps.sh --test), a venv with specd and its test deps (.venv in the repo),
# builds llama-server and fetches the tiny model into the cache (~/.cache/specd), checks types and
# lint, then runs pytest. Extra arguments go to pytest.
#
# pytest runs two pytest-xdist workers, a test file per worker at a time (`-n 2 --dist loadfile`:
# each worker has its own private systemd --user, and a file's tests share their servers), unless
# the arguments choose (-n/--numprocesses/--dist, or -p no:xdist). Every step says what it does
# and how long it took, so the first minutes are not silent.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
step() { echo "test.sh [$(( ($(date +%s) - started) / 60 )):$(printf %02d $(( ($(date +%s) - started) % 60 )))] $*" >&2; }

step "system packages for running specd and for its tests (apt; skipped when installed)"
scripts/install-system-deps.sh --test
if [ ! -x .venv/bin/python ]; then
  step "creating .venv"
  python3 -m venv .venv
fi
step "installing specd and its test tools into .venv (pip; about a minute the first time, PyGObject builds)"
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
step "llama-server (a cold build takes minutes; cached after)"
scripts/build-llama-server.sh >/dev/null
step "the tiny test model"
scripts/get-test-model.sh >/dev/null
export PYTHONUNBUFFERED=1
step "mypy --strict specd (about a minute with a cold cache)"
.venv/bin/python -m mypy specd
step "ruff check specd tests benchmarks"
.venv/bin/python -m ruff check specd tests benchmarks

parallel=(-n 2 --dist loadfile)
for arg in "$@"; do
  case "$arg" in
    -n|-n*|--numprocesses|--numprocesses=*|--dist|--dist=*|no:xdist) parallel=() ;;
  esac
done
step "pytest ${parallel[*]} $* (benchmarks/results/test-suite.md: how long the last full runs took)"
exec .venv/bin/python -m pytest -p no:cacheprovider "${parallel[@]}" "$@"
