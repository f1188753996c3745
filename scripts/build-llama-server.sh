#!/usr/bin/env bash
# Build llama-server from the llama.cpp sources vendored in the pinned llama-cpp-python sdist.
#
#   scripts/build-llama-server.sh [--cuda] [--jobs N] [--rebuild] [--fetch-only]
#
# --fetch-only downloads and unpacks the sources (printing their directory) and builds nothing.
# The sdist comes from $PIP_INDEX_URL (default https://pypi.org/simple), checked against the
# index's sha256, with its progress shown.
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
fetch_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --cuda) backend=cuda ;;
    --jobs) jobs="$2"; shift ;;
    --rebuild) rebuild=1 ;;
    --fetch-only) fetch_only=1 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
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

# The sdist, straight from the package index (PEP 691 JSON, or PEP 503 HTML from a mirror), checked
# against the index's sha256, with progress: every 10% (a line each) or, on a terminal, one line
# kept current. (pip download printed nothing for 100 s and prepared the package's build metadata,
# which a download does not need.)
fetch_sdist() {
  python3 - "$@" <<'PY'
import hashlib, json, os, re, sys, time, urllib.parse, urllib.request

version, target = sys.argv[1], sys.argv[2]
name = f"llama_cpp_python-{version}.tar.gz"
index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
tty = sys.stderr.isatty()


def say(text: str, *, keep: bool = False) -> None:
    line = f"build-llama-server: {text}"
    print(f"\r{line}\033[K" if keep else line, end="" if keep else "\n", file=sys.stderr, flush=True)


page = f"{index}/llama-cpp-python/"
ask = urllib.request.Request(page, headers={"Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.1"})
with urllib.request.urlopen(ask, timeout=60) as response:
    kind, body, base = response.headers.get("Content-Type", ""), response.read(), response.url
if "json" in kind:
    files = {f["filename"]: (urllib.parse.urljoin(base, f["url"]), f.get("hashes", {}).get("sha256"))
             for f in json.loads(body)["files"]}
else:
    files = {}
    for href in re.findall(r'href="([^"]+)"', body.decode("utf-8", "replace")):
        url, _, fragment = href.partition("#")
        files[urllib.parse.unquote(url.rsplit("/", 1)[-1])] = (urllib.parse.urljoin(base, url),
                                                                fragment.removeprefix("sha256=") or None)
if name not in files:
    sys.exit(f"build-llama-server: {page} lists no {name}")
url, sha256 = files[name]
partial = f"{target}.part"
digest = hashlib.sha256()
with urllib.request.urlopen(url, timeout=60) as response, open(partial, "wb") as out:
    total = int(response.headers.get("Content-Length") or 0)
    size = f"{total / 1e6:.0f} MB" if total else "size unknown"
    say(f"downloading the llama-cpp-python {version} sdist ({size}) from {urllib.parse.urlsplit(url).netloc}")
    got, shown, started = 0, -1, time.monotonic()
    while chunk := response.read(1 << 16):
        out.write(chunk)
        digest.update(chunk)
        got += len(chunk)
        mark = got * 100 // total if total else got // 10_000_000
        if mark == shown or (not tty and total and mark // 10 == shown // 10 and mark < 100):
            continue
        shown = mark
        elapsed = max(time.monotonic() - started, 1e-3)
        rate = got / elapsed
        left = f", about {(total - got) / rate:.0f} s left" if total and rate > 0 else ""
        done = f"{mark}% of {size}" if total else f"{got / 1e6:.0f} MB"
        say(f"downloading: {done} ({rate / 1e6:.1f} MB/s{left})", keep=tty)
    if tty:
        print(file=sys.stderr)
if sha256 and digest.hexdigest() != sha256:
    os.unlink(partial)
    sys.exit(f"build-llama-server: {name}: sha256 {digest.hexdigest()}, the index says {sha256}; not kept")
os.replace(partial, target)
say(f"downloaded {name}" + (" (sha256 checked)" if sha256 else " (the index gave no sha256)"))
PY
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
if [ "$rebuild" = 0 ] && [ "$fetch_only" = 0 ] && [ -x "$binary" ] && [ -f "$stamp" ] && \
   "$binary" --version >/dev/null 2>&1; then
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
    fetch_sdist "$LLAMA_CPP_PYTHON_VERSION" "$sdist" || { log "downloading the sdist failed (see above)"; exit 1; }
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
if [ "$fetch_only" = 1 ]; then
  echo "$src"
  exit 0
fi

log "configuring ($backend${amx_off:+, without AMX}); compiler output goes to $buildlog"
logged "configuring" cmake -S "$src" -B "$build" "${cmake_flags[@]}"
# What to expect, honestly: a cold CPU build took 322 s with 2 jobs on the reference machine's 2 idle
# cores (about 644 CPU-seconds; benchmarks/results/llama-server-build.md). On this box the build
# gets a share of the cores: all its jobs when the cores are free, else cores * jobs / (jobs + the
# 1-minute load average). Other CPUs are faster or slower: the progress lines below give the time
# left at the pace measured here.
expectation() {
  local load
  load="$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo 0)"
  if [ "$backend" != cpu ]; then
    echo "no figure is on record for a $backend build (much longer than a CPU build); the progress lines say how far it is"
    return
  fi
  awk -v cores="$(nproc)" -v jobs="$jobs" -v load="$load" 'BEGIN {
    share = (jobs + load <= cores) ? jobs : cores * jobs / (jobs + load)
    if (share > cores) share = cores
    printf "a cold build took 322 s on 2 idle cores of the reference machine; here %d cores, load average %.1f: ", cores, load
    printf "expect about %d min if these cores are as fast", int(644 / share / 60 + 0.5) < 1 ? 1 : int(644 / share / 60 + 0.5)
  }'
}
log "building llama-server with $jobs jobs: $(expectation)"
start=$(date +%s)
# cmake prints "[ 42%] Building ..." lines: show the percentage and the time left at the pace so
# far, once per change on one line on a terminal, and as a line every 10% elsewhere.
pace() {
  local pct="$1" spent=$(( $(date +%s) - start ))
  local left=$(( pct > 0 ? (spent * (100 - pct) / pct + 30) / 60 : 0 ))
  if [ "$pct" -gt 0 ] && [ "$pct" -lt 100 ] && [ "$left" -gt 0 ]; then
    printf '%d:%02d in, about %d min left at this pace' $(( spent / 60 )) $(( spent % 60 )) "$left"
  elif [ "$pct" -gt 0 ] && [ "$pct" -lt 100 ]; then
    printf '%d:%02d in, under a minute left at this pace' $(( spent / 60 )) $(( spent % 60 ))
  else
    printf '%d:%02d in' $(( spent / 60 )) $(( spent % 60 ))
  fi
}
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
      [ "$pct" != "$last" ] && printf '\rbuild-llama-server: building %3d%% (%s)\033[K' "$pct" "$(pace "$pct")" >&2
      last="$pct"
    elif [ $(( pct / 10 )) -gt $(( last / 10 )) ] || [ "$last" = -1 ]; then
      log "building $pct% ($(pace "$pct"))"
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
