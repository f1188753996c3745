"""Proxy overhead, measured against the real `specd daemon` on loopback. Prints figures; asserts nothing.

    python benchmarks/proxy_overhead.py [--requests 200] [--tokens 2000] [--rate 2000] [--idle-s 20]

1. Added TTFT: the same streamed request, alternately direct to the backend and through the
   daemon's proxy; p50/p95 of the difference in time to the first token.
2. Streaming: one stream of `--tokens` tokens paced at `--rate` tokens/s by the backend, direct and
   proxied; achieved rate, p99 and largest gap between token arrivals at the client.
3. Idle cost: the daemon's RSS and CPU after it has settled, with nothing to do.

The backend is `PacedBackendForBenchmark` (below), not llama-server: it paces tokens on an
absolute schedule so the client sees the proxy's jitter, not a model's. Everything runs in
separate processes on 127.0.0.1, in a throwaway HOME.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import psutil

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ---- the paced backend (run in its own process with --serve-backend PORT) -------------------------


def serve_backend(port: int) -> None:
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
        prefill_s = float(body.get("x_prefill_s", 0.005))

        async def events() -> AsyncIterator[bytes]:
            await asyncio.sleep(prefill_s)
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


# ---- measuring -----------------------------------------------------------------------------------


def stream_once(client: httpx.Client, url: str, tokens: int, rate: float) -> tuple[float, list[float]]:
    """TTFT and the arrival time of every token (seconds from sending the request)."""
    body = {"model": "bench", "messages": [{"role": "user", "content": "hi"}], "stream": True,
            "max_tokens": tokens, "x_rate": rate}
    arrivals: list[float] = []
    sent = time.perf_counter()
    with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        for chunk in response.iter_raw():
            now = time.perf_counter() - sent
            arrivals.extend([now] * chunk.count(b'"content":"'))
    return arrivals[0], arrivals


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def wait_http(url: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer")


def start_daemon(home: Path, backend_port: int, proxy_port: int) -> subprocess.Popen[bytes]:
    unit = "llama-bench.service"
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
           "XDG_STATE_HOME": str(home / ".local/state"), "PYTHONPATH": str(REPO)}
    unit_dir = home / ".config" / "systemd" / "user"
    unit_dir.mkdir(parents=True)
    (unit_dir / unit).write_text(
        "[Service]\nExecStart=/usr/bin/llama-server --host 127.0.0.1 "
        f"--port {backend_port} --alias bench\n"
    )
    profiles = home / "profiles"
    profiles.mkdir()
    config = home / "specd.toml"
    config.write_text(f'unit = "{unit}"\nprofiles_dir = "{profiles}"\n\n[proxy]\nlisten = "127.0.0.1:{proxy_port}"\n'
                      "\n[daemon]\nhealth_interval_s = 15\n\n[tuner]\nenabled = false\n")
    env["SPECD_CONFIG"] = str(config)
    log = open(home / "daemon.log", "wb")  # noqa: SIM115 (the daemon writes it for its lifetime)
    return subprocess.Popen([sys.executable, "-m", "specd", "daemon"], env=env, cwd=str(REPO),
                            stdout=log, stderr=subprocess.STDOUT)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--rate", type=float, default=2000.0)
    parser.add_argument("--idle-s", type=float, default=20.0)
    parser.add_argument("--serve-backend", type=int)
    args = parser.parse_args()
    if args.serve_backend:
        serve_backend(args.serve_backend)
        return
    backend_port, proxy_port = free_port(), free_port()
    backend = subprocess.Popen([sys.executable, __file__, "--serve-backend", str(backend_port)])
    home = Path(tempfile.mkdtemp(prefix="specd-bench-"))
    daemon = None
    try:
        wait_http(f"http://127.0.0.1:{backend_port}/health")
        daemon = start_daemon(home, backend_port, proxy_port)
        try:
            wait_http(f"http://127.0.0.1:{proxy_port}/health")
        except RuntimeError:
            print((home / "daemon.log").read_text()[-3000:], file=sys.stderr)
            raise
        direct, proxied = f"http://127.0.0.1:{backend_port}", f"http://127.0.0.1:{proxy_port}"
        report: dict[str, object] = {"machine": f"{psutil.cpu_count()} CPUs", "python": sys.version.split()[0],
                                     "load_avg_1m_at_start": round(os.getloadavg()[0], 2)}
        with httpx.Client(timeout=60) as client:
            for _ in range(20):  # warm up both paths
                stream_once(client, direct, 4, args.rate)
                stream_once(client, proxied, 4, args.rate)
            ttft_direct, ttft_proxied = [], []
            for _ in range(args.requests):
                ttft_direct.append(stream_once(client, direct, 4, args.rate)[0])
                ttft_proxied.append(stream_once(client, proxied, 4, args.rate)[0])
            added = [1000 * (p - d) for p, d in zip(ttft_proxied, ttft_direct, strict=True)]
            report["ttft_ms"] = {
                "direct_p50": round(1000 * statistics.median(ttft_direct), 3),
                "proxied_p50": round(1000 * statistics.median(ttft_proxied), 3),
                "added_p50": round(1000 * (statistics.median(ttft_proxied) - statistics.median(ttft_direct)), 3),
                "added_pairwise_p50": round(statistics.median(added), 3),
                "added_pairwise_p95": round(percentile(added, 0.95), 3),
            }
            for name, url in (("direct", direct), ("proxied", proxied)):
                _, arrivals = stream_once(client, url, args.tokens, args.rate)
                gaps = [1000 * (b - a) for a, b in itertools.pairwise(arrivals)]
                duration = arrivals[-1] - arrivals[0]
                report[f"stream_{name}"] = {
                    "tokens": len(arrivals), "tok_s": round((len(arrivals) - 1) / duration, 1),
                    "gap_p99_ms": round(percentile(gaps, 0.99), 3), "gap_max_ms": round(max(gaps), 3),
                }
        process = psutil.Process(daemon.pid)
        time.sleep(args.idle_s / 2)  # let start-up work (first health round, watcher scan) settle
        process.cpu_percent(None)
        time.sleep(args.idle_s)
        report["daemon_idle"] = {"rss_mb": round(process.memory_info().rss / 2**20, 1),
                                 "cpu_percent": round(process.cpu_percent(None), 2), "over_s": args.idle_s}
        print(json.dumps(report, indent=2))
    finally:
        if daemon is not None:
            daemon.terminate()
            daemon.wait(30)
        backend.terminate()
        backend.wait(10)


if __name__ == "__main__":
    main()
