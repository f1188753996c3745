#!/usr/bin/env bash
# Run specd's whole test suite on a fresh machine: installs the system packages, a venv with
# specd and its test deps (.venv in the repo), builds llama-server and fetches the tiny model
# into the cache (~/.cache/specd), then runs pytest. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-system-deps.sh
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
scripts/build-llama-server.sh >/dev/null
scripts/get-test-model.sh >/dev/null
export PYTHONUNBUFFERED=1
echo "test.sh: mypy --strict specd, ruff check specd tests benchmarks" >&2
.venv/bin/python -m mypy specd
.venv/bin/python -m ruff check specd tests benchmarks
exec .venv/bin/python -m pytest -p no:cacheprovider "$@"
