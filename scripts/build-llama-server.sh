#!/usr/bin/env bash
# Build llama-server from the llama.cpp sources vendored in the pinned llama-cpp-python sdist.
#
#   scripts/build-llama-server.sh [--cuda] [--jobs N]
#
# The build lives in a cache outside the repo, keyed by the sdist version and the build options:
#   ${SPECD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/specd}/llama-server/<version>-<backend>/
# A second run with the same key only checks the binary and prints its path (seconds).
# The last line printed is the absolute path of the llama-server binary.
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
backend=cpu
jobs="$(nproc)"
while [ $# -gt 0 ]; do
  case "$1" in
    --cuda) backend=cuda ;;
    --jobs) jobs="$2"; shift ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "build-llama-server.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
  esac
  shift
done

cache="${SPECD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/specd}"
key="${LLAMA_CPP_PYTHON_VERSION}-${backend}"
root="$cache/llama-server/$key"
src="$root/src"
build="$root/build"
binary="$build/bin/llama-server"
stamp="$root/.built"

log() { echo "build-llama-server: $*" >&2; }

if [ -x "$binary" ] && [ -f "$stamp" ] && "$binary" --version >/dev/null 2>&1; then
  log "cached build $key is up to date"
  echo "$binary"
  exit 0
fi

cmake_flags=(
  -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF
)
if [ "$backend" = cuda ]; then
  command -v nvcc >/dev/null || { log "--cuda needs nvcc on the PATH (CUDA toolkit)"; exit 1; }
  cmake_flags+=(-DGGML_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES:-native}")
fi
if command -v ccache >/dev/null; then
  cmake_flags+=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_DIR="$cache/ccache"
fi

mkdir -p "$root"
if [ ! -f "$src/CMakeLists.txt" ]; then
  sdist="$cache/sdist/llama_cpp_python-${LLAMA_CPP_PYTHON_VERSION}.tar.gz"
  if [ ! -f "$sdist" ]; then
    log "downloading the llama-cpp-python ${LLAMA_CPP_PYTHON_VERSION} sdist from PyPI"
    mkdir -p "$cache/sdist"
    python3 -m pip download --quiet --no-deps --no-binary :all: --no-build-isolation \
      "llama-cpp-python==${LLAMA_CPP_PYTHON_VERSION}" -d "$cache/sdist" >&2 \
      || python3 -m pip download --quiet --no-deps --no-binary :all: \
           "llama-cpp-python==${LLAMA_CPP_PYTHON_VERSION}" -d "$cache/sdist" >&2
  fi
  log "unpacking vendored llama.cpp"
  tmp="$(mktemp -d "$root/unpack.XXXXXX")"
  tar -xzf "$sdist" -C "$tmp" --strip-components=3 \
    --exclude='*/vendor/llama.cpp/models/*.gguf' \
    "llama_cpp_python-${LLAMA_CPP_PYTHON_VERSION}/vendor/llama.cpp"
  rm -rf "$src"
  mv "$tmp" "$src"
fi

log "configuring ($backend) in $build"
cmake -S "$src" -B "$build" "${cmake_flags[@]}" >&2
log "building llama-server with $jobs jobs (a cold build takes 10-20 minutes on 2 cores)"
start=$(date +%s)
cmake --build "$build" --target llama-server -j "$jobs" >&2
log "built in $(( $(date +%s) - start )) s"
"$binary" --version >&2
touch "$stamp"
echo "$binary"
