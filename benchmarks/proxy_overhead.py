"""What the proxy costs a client, beside nginx in front of the same backend, in one run.

    python benchmarks/proxy_overhead.py [--backend synthetic|llama|both] [--rounds 1500]
        [--stream-rounds 6] [--idle-s 20] [--out benchmarks/results/proxy-overhead.json]
        [--markdown benchmarks/results/proxy-overhead.md]

Six ways to reach one backend: A direct, B through nginx (Debian's package, which
`scripts/install-system-deps.sh --bench` installs; one worker, pooled keep-alive upstream
connections, buffering off: the usual SSE setup), C through the real
`specd daemon` proxy, D through a bare forwarder (benchmarks/forwarders.py: a FAKE proxy that only
copies bytes both ways on asyncio + httptools, doing none of specd's work; the floor of a Python
proxy on this machine), and E and F, two FAKE forwarders on specd's own upstream client that differ
only in the server half: E the proxy's hand-written server (specd.proxy.http1), F uvicorn's
HttpToolsProtocol with a raw ASGI app (uvicorn minus front, paired, answers whether the
maintained server is within 0.05 ms of added TTFT p50). Every round sends the same streamed request once
through each, in a shuffled order, so load drift from the shared machine hits all alike; the
added TTFT of B, C and D is taken against A *in the same round* (median with a 95% bootstrap
interval, and p95, of those differences), and specd's over nginx's is a ratio of the two medians
with a paired bootstrap interval (the same resampled rounds for both). Streaming rounds do the
same with one long stream each: achieved tokens/s and the p99 gap between token arrivals at the
client. CPU per request is each proxy's CPU time over the TTFT rounds less its background rate
measured just before. The load average is sampled before and after each phase and written to the
result.

Backends: `synthetic` is `serve_paced_backend_for_benchmark` (below; a FAKE llama-server that
paces tokens on an absolute schedule, so the client sees the proxies' jitter, not a model's);
`llama` is the real llama-server with the tiny model from ~/.cache/specd
(scripts/build-llama-server.sh, scripts/get-test-model.sh). Everything runs on 127.0.0.1 in
separate processes, in a throwaway HOME. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import itertools
import json
import os
import platform
import random
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import psutil

from specd.tune.stats import bootstrap_ci

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("SPECD_CACHE") or Path.home() / ".cache" / "specd")
LLAMA_SERVER = CACHE / "llama-server" / "0.3.36-cpu" / "build" / "bin" / "llama-server"
TINY_MODEL = CACHE / "models" / "gemma-3-270m-q4_k_m.gguf"
ROUTES = ("direct", "nginx", "specd", "bare", "front", "uvicorn")
FORWARDERS = REPO / "benchmarks" / "forwarders.py"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ---- the synthetic backend (its own process: --serve-backend PORT) --------------------------------


def serve_paced_backend_for_benchmark(port: int) -> None:
    """A FAKE llama-server: 5 ms of 'prefill', then tokens at the requested rate, on a fixed clock."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def models(request: Request) -> Response:
        return JSONResponse({"data": [{"id": "bench", "aliases": ["bench"]}]})

    async def chat(request: Request) -> Response:
        body = await request.json()
        tokens, rate = int(body.get("max_tokens", 16)), float(body.get("x_rate", 2000))

        async def events() -> AsyncIterator[bytes]:
            await asyncio.sleep(0.005)
            start = time.perf_counter()
            for index in range(tokens):
                delay = start + index / rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                yield b'data: {"choices":[{"index":0,"delta":{"content":"t%d"}}]}\n\n' % index
            yield (b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],'
                   b'"timings":{"predicted_n":%d}}\n\ndata: [DONE]\n\n' % tokens)

        return StreamingResponse(events(), media_type="text/event-stream")

    app = Starlette(routes=[Route("/health", health), Route("/v1/models", models),
                            Route("/v1/chat/completions", chat, methods=["POST"])])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


# ---- the routes ------------------------------------------------------------------------------------


def wait_http(url: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within {timeout_s:g} s")


@contextmanager
def process(argv: list[str], log: Path, **options: Any) -> Iterator[subprocess.Popen[bytes]]:
    with open(log, "wb") as out:
        child = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, **options)
    try:
        yield child
    finally:
        child.terminate()
        try:
            child.wait(30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def nginx_config(root: Path, backend_port: int, port: int) -> Path:
    """nginx in front of llama-server with what specd's proxy has too: pooled upstream connections
    and no buffering (SSE). llama-server closes a pooled connection after 5 streamed responses
    unannounced; without `non_idempotent` nginx answers the POST that meets it 502 (seen here)."""
    conf = root / "nginx.conf"
    conf.write_text(f"""worker_processes 1;
daemon off;
pid {root}/nginx.pid;
error_log {root}/nginx-error.log warn;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {root}/body; proxy_temp_path {root}/proxy;
  fastcgi_temp_path {root}/fastcgi; uwsgi_temp_path {root}/uwsgi; scgi_temp_path {root}/scgi;
  upstream backend {{ server 127.0.0.1:{backend_port}; keepalive 16; }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_read_timeout 300s;
      proxy_next_upstream error timeout non_idempotent;
    }}
  }}
}}
""")
    return conf


def daemon_home(root: Path, backend_port: int, port: int, specd_from: Path) -> dict[str, str]:
    """A throwaway HOME whose unit points the daemon's proxy at the backend."""
    home = root / "home"
    unit_dir = home / ".config" / "systemd" / "user"
    unit_dir.mkdir(parents=True)
    (unit_dir / "llama-bench.service").write_text(
        f"[Service]\nExecStart=/usr/bin/llama-server --host 127.0.0.1 --port {backend_port} --alias bench\n")
    (home / "profiles").mkdir()
    config = home / "specd.toml"
    config.write_text(f'unit = "llama-bench.service"\nprofiles_dir = "{home / "profiles"}"\n\n'
                      f'[proxy]\nlisten = "127.0.0.1:{port}"\n\n[daemon]\nhealth_interval_s = 15\n\n'
                      "[tuner]\nenabled = false\n")
    return {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_STATE_HOME": str(home / ".local/state"), "PYTHONPATH": str(specd_from), "SPECD_CONFIG": str(config)}


@contextmanager
def routes(backend: str, root: Path, specd_from: Path) -> Iterator[tuple[dict[str, str], dict[str, list[int]]]]:
    """Start the backend, nginx, the daemon and the bare forwarder; yield each route's URL and the
    proxies' PIDs."""
    backend_port, nginx_port, specd_port = free_port(), free_port(), free_port()
    with ExitStack() as stack:
        if backend == "synthetic":
            argv = [sys.executable, __file__, "--serve-backend", str(backend_port)]
        else:
            # one thread: on a shared 2-core machine two threads that spin-wait for each other made
            # TTFT 10x slower and wildly variable (seen here: p50 616 ms with -t 2, 57 ms with -t 1)
            argv = [str(LLAMA_SERVER), "-m", str(TINY_MODEL), "--host", "127.0.0.1", "--port", str(backend_port),
                    "-c", "2048", "-np", "1", "-t", "1", "--alias", "bench"]
        stack.enter_context(process(argv, root / f"{backend}.log"))
        wait_http(f"http://127.0.0.1:{backend_port}/health")
        nginx = stack.enter_context(process(["nginx", "-p", str(root), "-e", str(root / "nginx-error.log"), "-c",
                                             str(nginx_config(root, backend_port, nginx_port))],
                                            root / "nginx.log"))
        daemon = stack.enter_context(process([sys.executable, "-m", "specd", "daemon"], root / "daemon.log",
                                             env=daemon_home(root, backend_port, specd_port, specd_from),
                                             cwd=str(specd_from)))
        urls = {"direct": f"http://127.0.0.1:{backend_port}", "nginx": f"http://127.0.0.1:{nginx_port}",
                "specd": f"http://127.0.0.1:{specd_port}"}
        forwarders: dict[str, list[int]] = {}
        for kind in ("bare", "front", "uvicorn"):  # benchmarks/forwarders.py
            port = free_port()
            argv = [sys.executable, str(FORWARDERS), kind, str(port), str(backend_port)]
            child = stack.enter_context(process(argv, root / f"{kind}.log",
                                                env={**os.environ, "PYTHONPATH": str(specd_from)}))
            urls[kind], forwarders[kind] = f"http://127.0.0.1:{port}", [child.pid]
        try:
            for url in urls.values():
                wait_http(f"{url}/health", 30)
        except RuntimeError:
            print((root / "daemon.log").read_text()[-3000:], (root / "nginx-error.log").read_text()[-2000:],
                  file=sys.stderr)
            raise
        nginx_pids = [nginx.pid] + [c.pid for c in psutil.Process(nginx.pid).children()]
        yield urls, {"nginx": nginx_pids, "specd": [daemon.pid], **forwarders}


# ---- measuring -------------------------------------------------------------------------------------


RECONNECTS: dict[str, int] = {}
FAILED: dict[str, list[str]] = {}


class RouteFailed(Exception):
    """A route answered an error instead of a stream."""


def stream_once(client: httpx.Client, url: str, body: dict[str, Any]) -> list[float]:
    """Arrival times (s from sending) of every token event; the first one is the TTFT.

    llama-server closes a keep-alive connection after its 5th streamed response, without saying so
    (seen with this build: `Keep-Alive: max=100`, then a close): a request sent on it meets a closed
    connection before any response. That is the client's connection, not a route's latency: it is
    sent again on a fresh one, timed from then, and counted in RECONNECTS.
    """
    for attempt in (1, 2):
        try:
            return _stream_once(client, url, body)
        except httpx.RemoteProtocolError as exc:
            if attempt == 2 or "without sending a response" not in str(exc):
                raise RuntimeError(f"{url}: {type(exc).__name__}: {exc}") from exc
            RECONNECTS[url] = RECONNECTS.get(url, 0) + 1
    raise AssertionError("unreachable")


def _stream_once(client: httpx.Client, url: str, body: dict[str, Any]) -> list[float]:
    arrivals: list[float] = []
    sent = time.perf_counter()
    try:
        with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
            if response.status_code != 200:
                raise RouteFailed(f"{url}: HTTP {response.status_code}: {response.read()[:300]!r}")
            for chunk in response.iter_raw():
                now = time.perf_counter() - sent
                arrivals.extend([now] * chunk.count(b'"content":"'))
    except httpx.HTTPError as exc:
        if isinstance(exc, httpx.RemoteProtocolError) and not arrivals:
            raise
        raise RuntimeError(f"{url}: {type(exc).__name__}: {exc}") from exc
    if not arrivals:
        raise RuntimeError(f"{url}: a stream without tokens")
    return arrivals


def request_body(backend: str, tokens: int, rate: float) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "bench", "messages": [{"role": "user", "content": "Say hi."}],
                            "stream": True, "max_tokens": tokens, "temperature": 0}
    if backend == "synthetic":
        body["x_rate"] = rate
    else:
        body["ignore_eos"] = True
    return body


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def cpu_s(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        times = psutil.Process(pid).cpu_times()
        total += times.user + times.system
    return total


def load() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


def background_cpu_s_per_s(pids: dict[str, list[int]], seconds: float) -> dict[str, float]:
    """Each proxy's CPU use with no request in flight (specd's health monitor and status file),
    subtracted from its CPU per request: on a slow backend a round takes seconds."""
    before = {name: cpu_s(p) for name, p in pids.items()}
    time.sleep(seconds)
    return {name: (cpu_s(p) - before[name]) / seconds for name, p in pids.items()}


def run_rounds(client: httpx.Client, urls: dict[str, str], body: dict[str, Any], rounds: int,
               shuffle: random.Random) -> dict[str, list[list[float]]]:
    """`rounds` times, the same request through each route in a shuffled order."""
    arrivals: dict[str, list[list[float]]] = {route: [] for route in ROUTES}
    for _ in range(rounds):
        order = list(ROUTES)
        shuffle.shuffle(order)
        for route in order:
            for attempt in range(3):  # a failure is counted (FAILED) and the request sent again
                try:
                    arrivals[route].append(stream_once(client, urls[route], body))
                    break
                except RuntimeError as broke:
                    raise RuntimeError(f"route {route}: {broke}") from broke
                except RouteFailed as failed:
                    FAILED.setdefault(urls[route], []).append(str(failed)[:200])
                    if attempt == 2:
                        raise
    return arrivals


def added_ttft(ttft: dict[str, list[float]], route: str) -> dict[str, Any]:
    """The route's TTFT minus the direct one of the same round: median (95% bootstrap CI) and p95."""
    added = [p - d for p, d in zip(ttft[route], ttft["direct"], strict=True)]
    lo, hi = bootstrap_ci(added)
    return {"added_ttft_ms_p50": round(statistics.median(added), 3),
            "added_ttft_ms_p50_ci95": [round(lo, 3), round(hi, 3)],
            "added_ttft_ms_p95": round(percentile(added, 0.95), 3)}


def measure(backend: str, urls: dict[str, str], pids: dict[str, list[int]], args: argparse.Namespace,
            shuffle: random.Random) -> dict[str, Any]:
    ttft_body = request_body(backend, 4 if backend == "synthetic" else 1, args.rate)  # 1: less model time per round
    stream_body = request_body(backend, args.tokens if backend == "synthetic" else args.llama_tokens, args.rate)
    result: dict[str, Any] = {"load_avg_1_5_15_before": load()}
    # llama-server closes a keep-alive connection idle for 5 s; the client drops its own after 1 s,
    # so a route left idle during the others' long streams never meets a closed connection.
    with httpx.Client(timeout=120, limits=httpx.Limits(keepalive_expiry=1.0)) as client:
        run_rounds(client, urls, ttft_body, args.warmup, shuffle)
        background = background_cpu_s_per_s(pids, args.background_s)
        cpu_before, started = {name: cpu_s(p) for name, p in pids.items()}, time.monotonic()
        firsts = run_rounds(client, urls, ttft_body, args.rounds, shuffle)
        elapsed = time.monotonic() - started
        cpu_used = {name: cpu_s(p) - cpu_before[name] - background[name] * elapsed for name, p in pids.items()}
        result["load_avg_1_5_15_after_ttft"] = load()
        arrivals = run_rounds(client, urls, stream_body, args.stream_rounds, shuffle)
    result["load_avg_1_5_15_after"] = load()
    result["client_reconnects"] = {route: RECONNECTS.pop(urls[route], 0) for route in ROUTES}
    result["failed_requests"] = {route: FAILED.pop(urls[route], []) for route in ROUTES}
    ttft = {route: [1000 * one[0] for one in firsts[route]] for route in ROUTES}
    result["ttft_ms"] = {route: {"p50": round(statistics.median(v), 3), "p95": round(percentile(v, 0.95), 3)}
                         for route, v in ttft.items()}
    gaps = {route: [1000 * (b - a) for one in arrivals[route] for a, b in itertools.pairwise(one)]
            for route in ROUTES}
    rates = {route: statistics.median((len(a) - 1) / (a[-1] - a[0]) for a in arrivals[route]) for route in ROUTES}
    result["direct"] = {"stream_tok_s": round(rates["direct"], 1),
                        "gap_ms_p99": round(percentile(gaps["direct"], 0.99), 3)}
    for route in ROUTES[1:]:
        result[route] = {
            **added_ttft(ttft, route),
            "stream_tok_s": round(rates[route], 1),
            "gap_ms_p99": round(percentile(gaps[route], 0.99), 3),
            "added_gap_ms_p99": round(percentile(gaps[route], 0.99) - percentile(gaps["direct"], 0.99), 3),
            "cpu_ms_per_request": round(1000 * cpu_used[route] / args.rounds, 3),
            "background_cpu_percent": round(100 * background[route], 2),
        }
    ratio, (lo, hi) = ratio_of_added(ttft, "specd", "nginx")
    result["specd_over_nginx_added_ttft_p50"] = round(ratio, 2)
    result["specd_over_nginx_ci95"] = [round(lo, 2), round(hi, 2)]
    result["within_3x_of_nginx"] = ratio <= 3.0
    difference, (lo, hi) = difference_of_added(ttft, "uvicorn", "front")
    result["uvicorn_minus_front_added_ttft_p50_ms"] = round(difference, 3)
    result["uvicorn_minus_front_ci95"] = [round(lo, 3), round(hi, 3)]
    result["uvicorn_within_0_05_ms_of_front"] = ("yes" if hi <= 0.05 else "no" if lo > 0.05 else
                                                 "unresolved: the interval straddles 0.05 ms")
    return result


def difference_of_added(ttft: dict[str, list[float]], route: str, baseline: str, resamples: int = 2000,
                        seed: int = 0) -> tuple[float, tuple[float, float]]:
    """median added TTFT of `route` minus that of `baseline` (ms), with a paired percentile-bootstrap
    95% interval (each resample draws whole rounds)."""
    import numpy as np

    direct = np.array(ttft["direct"])
    ours, theirs = np.array(ttft[route]) - direct, np.array(ttft[baseline]) - direct
    point = float(np.median(ours) - np.median(theirs))
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, direct.size, size=(resamples, direct.size))
    differences = np.median(ours[rows], axis=1) - np.median(theirs[rows], axis=1)
    lo, hi = np.quantile(differences, [0.025, 0.975])
    return point, (float(lo), float(hi))


def ratio_of_added(ttft: dict[str, list[float]], route: str, baseline: str, resamples: int = 2000,
                   seed: int = 0) -> tuple[float, tuple[float, float]]:
    """median added TTFT of `route` over that of `baseline`, with a paired percentile-bootstrap 95%
    interval: each resample draws whole rounds, so both medians come from the same rounds."""
    import numpy as np

    direct = np.array(ttft["direct"])
    ours, theirs = np.array(ttft[route]) - direct, np.array(ttft[baseline]) - direct
    point = float(np.median(ours) / max(float(np.median(theirs)), 1e-3))
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, direct.size, size=(resamples, direct.size))
    ratios = np.median(ours[rows], axis=1) / np.maximum(np.median(theirs[rows], axis=1), 1e-3)
    lo, hi = np.quantile(ratios, [0.025, 0.975])
    return point, (float(lo), float(hi))


def idle_cost(pid: int, idle_s: float) -> dict[str, float]:
    daemon = psutil.Process(pid)
    time.sleep(idle_s / 2)  # let start-up work (first health round, watcher scan) settle
    daemon.cpu_percent(None)
    time.sleep(idle_s)
    return {"rss_mb": round(daemon.memory_info().rss / 2**20, 1),
            "cpu_percent": round(daemon.cpu_percent(None), 2), "over_s": idle_s}


def provenance(specd_from: Path) -> dict[str, Any]:
    commit = subprocess.run(["git", "-C", str(specd_from), "rev-parse", "--short", "HEAD"], check=False,
                            capture_output=True,
                            text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(specd_from), "status", "--porcelain", "--", "specd", "benchmarks"],
                           check=False,
                           capture_output=True, text=True).stdout.strip()
    nginx = subprocess.run(["nginx", "-v"], check=False, capture_output=True, text=True).stderr.strip()
    return {"command": shlex.join(["python", *sys.argv]),
            "machine": f"{platform.node()}: {platform.platform()}, {psutil.cpu_count()} CPUs, "
                       f"{round(psutil.virtual_memory().total / 2**30)} GiB",
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "specd_commit": commit + ("+uncommitted" if dirty else ""), "python": sys.version.split()[0],
            "nginx": nginx}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("synthetic", "llama", "both"), default="both")
    parser.add_argument("--rounds", type=int, default=1500, help="TTFT rounds (one request per route each)")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--stream-rounds", type=int, default=6)
    parser.add_argument("--tokens", type=int, default=2000, help="synthetic stream length")
    parser.add_argument("--rate", type=float, default=2000.0, help="synthetic tokens/s")
    parser.add_argument("--llama-tokens", type=int, default=100, help="llama-server stream length")
    parser.add_argument("--background-s", type=float, default=10.0, help="idle window for background CPU")
    parser.add_argument("--idle-s", type=float, default=20.0)
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--markdown", type=Path,
                        help="also write the results page (benchmarks/proxy_overhead_report.py)")
    parser.add_argument("--specd-from", type=Path, default=REPO,
                        help="the checkout whose `specd daemon` is measured (another commit, to compare)")
    parser.add_argument("--serve-backend", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_backend:
        serve_paced_backend_for_benchmark(args.serve_backend)
        return
    if shutil.which("nginx") is None:
        sys.exit("proxy_overhead: nginx is not installed (scripts/install-system-deps.sh installs it)")
    report: dict[str, Any] = {**provenance(args.specd_from), "results": {}}
    shuffle = random.Random(args.seed)
    for backend in ("synthetic", "llama") if args.backend == "both" else (args.backend,):
        if backend == "llama" and not (LLAMA_SERVER.exists() and TINY_MODEL.exists()):
            sys.exit(f"proxy_overhead: {LLAMA_SERVER} or {TINY_MODEL} is missing")
        with (tempfile.TemporaryDirectory(prefix="specd-overhead-") as tmp,
              routes(backend, Path(tmp), args.specd_from) as (urls, pids)):
            report["results"][backend] = measure(backend, urls, pids, args, shuffle)
            if backend == "synthetic" and args.idle_s > 0:
                report["daemon_idle"] = idle_cost(pids["specd"][0], args.idle_s)
        print(json.dumps({backend: report["results"][backend]}, indent=2), flush=True)
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    if args.markdown is not None:
        sys.path.insert(0, str(Path(__file__).parent))
        from proxy_overhead_report import render

        args.markdown.write_text(render(report, args.out.name if args.out is not None else "(no --out)"))


if __name__ == "__main__":
    main()
