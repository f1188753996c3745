#!/usr/bin/env bash
# Build llama-server from the llama.cpp sources vendored in the pinned llama-cpp-python sdist.
#
#   scripts/build-llama-server.sh [--cuda] [--jobs N] [--rebuild]
#
# The build lives in a cache outside the repo, keyed by the sdist version and the build options:
#   ${SPECD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/specd}/llama-server/<version>-<backend>/
# (<backend> is cpu, or cuda-sm<arch> with arch from CUDA_ARCHITECTURES or the GPU's compute capability).
# A second run with the same key only checks the binary and prints its path (seconds).
# The last line printed is the absolute path of the llama-server binary. Compiler output goes to
# <cache>/llama-server/<key>/build.log; the terminal gets a progress line, and the log's path on failure.
# On x86 the CPU build leaves out Intel AMX: ggml's AMX kernels crash (SIGSEGV at the first decode) on
# hosts that advertise AMX to -march=native but do not grant the process the tile state.
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
backend=cpu
jobs="$(nproc)"
rebuild=0
while [ $# -gt 0 ]; do
  case "$1" in
    --cuda) backend=cuda ;;
    --jobs) jobs="$2"; shift ;;
    --rebuild) rebuild=1 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "build-llama-server.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
  esac
  shift
done

log() { echo "build-llama-server: $*" >&2; }

# Run a step with its output in the build log; on failure say so, show the log's tail and where it is.
logged() {
  local what="$1"; shift
  if ! "$@" >>"$buildlog" 2>&1; then
    log "$what failed; the last lines of $buildlog:"
    tail -n 25 "$buildlog" >&2
    log "full log: $buildlog"
    exit 1
  fi
}

cuda_arch=""
cuda_hints=()
if [ "$backend" = cuda ]; then
  command -v nvcc >/dev/null || { log "--cuda needs nvcc on the PATH (CUDA toolkit)"; exit 1; }
  # CMake's 'native' needs a GPU visible at configure time; ask the driver for the compute capability
  # instead, and fall back to sm_90 (H100/H200) on a build box without one.
  cuda_arch="${CUDA_ARCHITECTURES:-}"
  if [ -z "$cuda_arch" ]; then
    cuda_arch="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null \
      | tr -d ' .' | grep -E '^[0-9]+$' | sort -u | paste -sd ';' -)" || cuda_arch=""
  fi
  if [ -z "$cuda_arch" ]; then
    cuda_arch=90
    log "no GPU visible: building for sm_90; set CUDA_ARCHITECTURES (86 = RTX 30xx, 89 = RTX 40xx, 120 = RTX 50xx)"
  fi
  # CUDA installed from pip wheels (nvidia-cublas, ...) keeps cuBLAS in site-packages and has no
  # libcuda stub, where CMake's FindCUDAToolkit does not look: point it at them.
  toolkit="$(nvcc --dryrun -c -x cu /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$ _HERE_=//p' | head -1)/.."
  if ! ls "$toolkit"/lib64/libcublas.so "$toolkit"/targets/*/lib/libcublas.so >/dev/null 2>&1; then
    sites="$(python3 -c 'import site; print("\n".join(site.getsitepackages()))' 2>/dev/null || true)"
    pip_cuda() { for dir in $sites; do find "$dir/nvidia" -name "$1" 2>/dev/null; done | sort | head -1; }
    cublas="$(pip_cuda 'libcublas.so*')" cublaslt="$(pip_cuda 'libcublasLt.so*')"
    header="$(pip_cuda cublas_v2.h)"
    if [ -n "$cublas" ] && [ -n "$cublaslt" ] && [ -n "$header" ]; then
      log "cuBLAS is not in $toolkit: using pip's $(dirname "$cublas")"
      cuda_hints+=("-DCUDA_cublas_LIBRARY=$cublas" "-DCUDA_cublasLt_LIBRARY=$cublaslt"
                   "-DCMAKE_CUDA_FLAGS=-I$(dirname "$header")" "-DCMAKE_CXX_FLAGS=-I$(dirname "$header")")
    fi
  fi
  if ! ls "$toolkit"/lib64/stubs/libcuda.so "$toolkit"/targets/*/lib/stubs/libcuda.so >/dev/null 2>&1; then
    driver="$(ldconfig -p 2>/dev/null | sed -n 's/^[[:space:]]*libcuda\.so\.1 (libc6,x86-64) => //p' | head -1)"
    if [ -n "$driver" ]; then cuda_hints+=("-DCUDA_cuda_driver_LIBRARY=$driver"); fi
  fi
fi

cache="${SPECD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/specd}"
key="${LLAMA_CPP_PYTHON_VERSION}-${backend}"
if [ "$backend" = cuda ]; then key="${key}-sm${cuda_arch//;/-}"; fi
root="$cache/llama-server/$key"
src="$root/src"
build="$root/build"
binary="$build/bin/llama-server"
stamp="$root/.built"

buildlog="$root/build.log"
amx_off=()
if [ "$backend" = cpu ] && [ "$(uname -m)" = x86_64 ]; then
  amx_off=(-mno-amx-tile -mno-amx-int8 -mno-amx-bf16)
fi

if [ "$rebuild" = 0 ] && [ ${#amx_off[@]} -gt 0 ] && [ -f "$build/CMakeCache.txt" ] \
   && ! grep -q -- -mno-amx-tile "$build/CMakeCache.txt"; then
  log "the cached build $key includes AMX kernels, which crash on hosts that do not grant AMX: rebuilding"
  rebuild=1
fi
if [ "$rebuild" = 0 ] && [ -x "$binary" ] && [ -f "$stamp" ] && "$binary" --version >/dev/null 2>&1; then
  log "cached build $key is up to date"
  echo "$binary"
  exit 0
fi

cmake_flags=(
  -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF
)
if [ "$backend" = cuda ]; then
  cmake_flags+=(-DGGML_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=${cuda_arch}" "${cuda_hints[@]}")
fi
if [ ${#amx_off[@]} -gt 0 ]; then
  cmake_flags+=("-DCMAKE_C_FLAGS=${amx_off[*]}" "-DCMAKE_CXX_FLAGS=${amx_off[*]}")
fi
if command -v ccache >/dev/null; then
  cmake_flags+=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_DIR="$cache/ccache"
fi

mkdir -p "$root"
: >"$buildlog"
if [ ! -f "$src/CMakeLists.txt" ]; then
  sdist="$cache/sdist/llama_cpp_python-${LLAMA_CPP_PYTHON_VERSION}.tar.gz"
  if [ ! -f "$sdist" ]; then
    mkdir -p "$cache/sdist"
    # pip prepares the sdist's metadata with its build backend: reuse an installed scikit-build-core
    # (no network for build deps), else let pip fetch it into an isolated build environment.
    isolation=()
    if python3 -c 'import scikit_build_core' >/dev/null 2>&1; then isolation=(--no-build-isolation); fi
    log "downloading the llama-cpp-python ${LLAMA_CPP_PYTHON_VERSION} sdist from PyPI"
    logged "downloading the sdist" python3 -m pip download --quiet --no-deps --no-binary :all: "${isolation[@]}" \
      "llama-cpp-python==${LLAMA_CPP_PYTHON_VERSION}" -d "$cache/sdist"
  fi
  log "unpacking vendored llama.cpp"
  tmp="$(mktemp -d "$root/unpack.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  tar -xzf "$sdist" -C "$tmp" --strip-components=3 \
    --exclude='*/vendor/llama.cpp/models/*.gguf' \
    "llama_cpp_python-${LLAMA_CPP_PYTHON_VERSION}/vendor/llama.cpp"
  rm -rf "$src"
  mv "$tmp" "$src"
  trap - EXIT
fi

log "configuring ($backend${amx_off:+, without AMX}); compiler output goes to $buildlog"
logged "configuring" cmake -S "$src" -B "$build" "${cmake_flags[@]}"
log "building llama-server with $jobs jobs (a cold build: about 5-6 minutes on 2 cores, see benchmarks/results/llama-server-build.md)"
start=$(date +%s)
# cmake prints "[ 42%] Building ..." lines: show the percentage, once per change, on one line on a
# terminal and as a line every 10% elsewhere.
progress() {
  local last=-1 pct line
  while IFS= read -r line; do
    printf '%s\n' "$line" >>"$buildlog"
    case "$line" in
      "["*"%]"*) pct="${line#\[}"; pct="${pct%%\%*}"; pct="${pct// /}" ;;
      *) continue ;;
    esac
    [[ "$pct" =~ ^[0-9]+$ ]] || continue
    if [ -t 2 ]; then
      [ "$pct" != "$last" ] && printf '\rbuild-llama-server: building %3d%%' "$pct" >&2
      last="$pct"
    elif [ $(( pct / 10 )) -gt $(( last / 10 )) ] || [ "$last" = -1 ]; then
      log "building $pct%"
      last="$pct"
    fi
  done
  if [ -t 2 ]; then printf '\n' >&2; fi
}
set +e
cmake --build "$build" --target llama-server -j "$jobs" 2>&1 | progress
status="${PIPESTATUS[0]}"
set -e
if [ "$status" != 0 ]; then
  log "the build failed (exit $status); the last lines of $buildlog:"
  grep -E -m 20 'error|Error' "$buildlog" >&2 || tail -n 25 "$buildlog" >&2
  log "full log: $buildlog"
  exit 1
fi
log "built in $(( $(date +%s) - start )) s"
"$binary" --version >>"$buildlog" 2>&1 || { log "the new binary does not run: see $buildlog"; exit 1; }
touch "$stamp"
echo "$binary"
