#!/usr/bin/env bash
# Build the CUDA llama-server, make random-weight test models, measure their VRAM, compare with
# specd.gpu.vram. Meant for the device machine, from the repo root, with .devwork/carry carried:
#
#   benchmarks/gpu_vram/run.sh            # BUDGET_S=540 seconds for this call
#   WORK=/var/tmp/specd-gpu SERVER=/path/llama-server MODELS="hybrid9:q8_0:qwen35 ..." CASE_GROUPS=held4 \
#     benchmarks/gpu_vram/run.sh         # build and models outside the tree, a prebuilt binary, run 4
#
# .devwork/carry holds (prepared here, see README.md): llama_cpp_python-0.3.36.tar.gz (the sdist
# without docs/ and vocab models), gguf-*.whl, vocab-<name>.json.gz for each vocab MODELS names.
# Everything else goes to .devwork/dev (ignored; kept while the machine stays warm), so a second
# call resumes: the build, each model and each measured case are done once.
set -uo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
carry="$repo/.devwork/carry"
work="${WORK:-$repo/.devwork/dev}"   # WORK outside the repo survives a re-sent tree
out="${OUT:-$work/out}"
start=$(date +%s)
deadline=$(( start + ${BUDGET_S:-540} ))
mkdir -p "$work/models" "$work/cache/sdist" "$out"
export SPECD_CACHE="$work/cache" PYTHONUNBUFFERED=1
say() { echo "[run.sh +$(( $(date +%s) - start ))s] $*"; }

# 1. Python: specd from the tree; gguf from the carried wheel when the image lacks it
if ! python3 -c 'import gguf' 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$carry"/gguf-*.whl || exit 1
fi
export PYTHONPATH="$repo:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
python3 -c 'import gguf, psutil, pynvml, numpy; import specd.gpu.vram, specd.gpu.nvml' || exit 1
say "$(nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,compute_cap --format=csv,noheader)"

# 2. the CUDA build, in its own session so that it survives this call's end; SERVER (a binary an
# earlier call built, carried back as a tarball) skips it
if [ -n "${SERVER:-}" ] && [ -x "$SERVER" ] && [ ! -f "$work/build.rc" ]; then
  echo "$SERVER" > "$work/build.log"; echo 0 > "$work/build.rc"
fi
[ -f "$work/build.rc" ] || [ -f "$work/cache/sdist/llama_cpp_python-0.3.36.tar.gz" ] \
  || cp "$carry/llama_cpp_python-0.3.36.tar.gz" "$work/cache/sdist/"
if [ ! -f "$work/build.rc" ] && ! { [ -f "$work/build.pid" ] && kill -0 "$(cat "$work/build.pid")" 2>/dev/null; }; then
  say "starting the CUDA build"
  setsid bash -c "'$repo/scripts/build-llama-server.sh' --cuda --jobs \$(nproc) > '$work/build.log' 2>&1; \
    echo \$? > '$work/build.rc'" < /dev/null > /dev/null 2>&1 &
  echo $! > "$work/build.pid"
fi

# 3. models, one after the other, while the build runs
make_model() {  # preset type vocab
  local target="$work/models/$1-$2.gguf"
  [ -f "$target" ] && return 0
  python3 "$here/make_models.py" model "$1" "$2" "$carry/vocab-$3.json.gz" "$target.part" && mv "$target.part" "$target"
}
# MODELS: "preset:type:vocab ..." (run 3's by default; runs 1-2 used llama-1b, llama-8b, gemma3-4b)
MODELS="${MODELS:-hybrid27:q8_0:qwen35 hybrid08:q8_0:qwen35 dflash27:q8_0:qwen35 moe35:q8_0:qwen35 llama-1b:f16:llama-bpe}"
( for spec in $MODELS; do IFS=: read -r preset type vocab <<< "$spec"; make_model "$preset" "$type" "$vocab"; done
) > "$work/models.log" 2>&1 &
models_pid=$!

# 4. wait for the build (configure errors show within a minute)
while [ ! -f "$work/build.rc" ] && [ "$(date +%s)" -lt $(( deadline - 30 )) ]; do sleep 5; done
grep -E "^build-llama-server|CMake Error|error:|Using CMAKE_CUDA" "$work/build.log" | head -20
if [ ! -f "$work/build.rc" ]; then
  say "build still running: $(grep -c 'Building' "$work/build.log") objects so far; call again"
  tail -3 "$work/build.log"; wait "$models_pid"; cat "$work/models.log"; exit 3
fi
if [ "$(cat "$work/build.rc")" != 0 ]; then
  say "build failed"; tail -40 "$work/build.log"; cp "$work/build.log" "$out/"; exit 1
fi
server="$(tail -1 "$work/build.log")"
say "built: $server"
pack_pid=""
if [ -n "${PACK_SERVER:-}" ] && [ ! -f "$work/packed" ]; then   # the binary back as a split xz tarball
  ( cd "$(dirname "$server")" && tar -cf - llama-server | xz -T8 -6 | split -b 15m - "$out/srv.tar.xz." \
      && touch "$work/packed" ) &
  pack_pid=$!
fi
wait "$models_pid"; cat "$work/models.log"; ls -la "$work/models"

# 5. measure until the deadline; results accumulate across calls
export ESTIMATOR="$(cat "$repo/ESTIMATOR" 2>/dev/null || echo unknown)"
DEADLINE=$(( deadline - 75 )) python3 "$here/measure.py" run --server "$server" --models "$work/models" \
  --results "$work/results.jsonl" --groups "${CASE_GROUPS:-fit3,held3}"
[ -n "$pack_pid" ] && wait "$pack_pid"
cp "$work/results.jsonl" "$out/results.jsonl"
tar -czf "$out/logs.tar.gz" -C "$work" logs models.log build.log 2>/dev/null
say "done: $(wc -l < "$work/results.jsonl") cases measured"
