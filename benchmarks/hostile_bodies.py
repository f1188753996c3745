"""Hostile request bodies through the real `specd daemon` proxy: its memory, and everyone else's latency.

    python benchmarks/hostile_bodies.py [--specd-from CHECKOUT] [--repeat 5] [--out FILE.json]

The bodies of issue 36, one phase after another (each of the first four `--repeat` times in a
row, for enough latency samples), sent to the proxy of a real `specd daemon` (a plain process in a
throwaway HOME, as benchmarks/proxy_overhead.py runs it):

1. one 60 MB chat body whose padding is small JSON objects (`{"k":1},` ...);
2. three 30 MB bodies of the same kind at once;
3. 32 bodies of 1 MB of small objects at once;
4. a chat body holding a 200,000-deep nest of arrays;
5. ten uploads that declare 60 MB, send 30 MB and then stop (the proxy answers them at its body
   timeout, 60 s, or refuses them at once when it holds too much).

Throughout, one client asks `GET /v1/models` through the proxy every 20 ms on a keep-alive
connection, another asks the backend the same straight (the trivial baseline: what the box itself
gives a client at that moment), and two hold streams of tokens paced every 20 ms, one through the
proxy and one straight from the backend; the latencies are reported per phase (p50, p99, max; a
stream as the gap between tokens).
The daemon's RSS is sampled every 50 ms and its peak per phase is the kernel's high-water mark
(VmHWM, reset through /proc/PID/clear_refs at each phase). After the last answer, RSS is watched
for 60 s: the time until it is back under IDLE_BOUND_MB.

The bodies, the raw-socket clients and the memory readers are tests/hostile_bodies.py's, shared
with the fault test that asserts issue 36's bars on one run of each body
(tests/system/test_fault_hostile_burst.py).

The backend is a FAKE llama-server in this file (`--serve-backend`): a thread per connection reads
each body to its end into one reused buffer and answers at once, so what is measured is the
daemon. `--specd-from` runs another checkout's daemon (the commit before a change, for its
"before" figures) with this benchmark.
Prints and writes figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import shlex
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import psutil
from proxy_overhead import daemon_home, free_port, process, wait_http

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.fakes.http1_raw import read_head
from tests.hostile_bodies import (
    ask_models,
    at_once,
    deep_nest_body,
    memory_mb,
    percentiles,
    post,
    reset_peak,
    small_objects_body,
    start_partial_upload,
)

TOKEN_PERIOD_S = 0.02
MODELS_PERIOD_S = 0.02
SETTLE_WATCH_S = 60.0
IDLE_BOUND_MB = 150.0


# ---- the FAKE backend (its own process: --serve-backend PORT) ----------------------------------------


def serve_draining_backend_for_benchmark(port: int) -> None:
    """A FAKE llama-server, one thread per connection, that reads every body to its end into one
    reused buffer (recv_into: no allocation, the interpreter released): what it costs the box is
    the kernel's copy, so the daemon's figures are the daemon's. A request with the header
    `x-bench-stream: N` gets N tokens paced every TOKEN_PERIOD_S, any other a one-token answer."""
    import socketserver

    models = json.dumps({"data": [{"id": "bench", "aliases": ["bench"]}]}).encode()
    answer = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}],
                         "usage": {"prompt_tokens": 1, "completion_tokens": 1}}).encode()

    class Connection(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            sock, pending, sink = self.request, b"", bytearray(1 << 20)
            while True:
                read = read_head(sock, pending)
                if read is None:
                    return
                head, pending = read
                lines = head.decode("latin-1").split("\r\n")
                headers = dict(line.lower().split(": ", 1) for line in lines[1:] if ": " in line)
                left = int(headers.get("content-length", "0")) - len(pending)
                pending = b"" if left >= 0 else pending[len(pending) + left:]
                while left > 0:
                    got = sock.recv_into(sink, min(left, len(sink)))
                    if not got:
                        return
                    left -= got
                path = lines[0].split(" ")[1]
                tokens = int(headers.get("x-bench-stream", "0"))
                if tokens:
                    self.stream(sock, tokens)
                else:
                    body = answer if path.startswith("/v1/chat") else models if path == "/v1/models" else b"{}"
                    sock.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%b"
                                 % (len(body), body))

        def stream(self, sock: socket.socket, tokens: int) -> None:
            sock.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
            start = time.perf_counter()
            for index in range(tokens):
                delay = start + index * TOKEN_PERIOD_S - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                event = b'data: {"choices":[{"index":0,"delta":{"content":"t%d"}}]}\n\n' % index
                sock.sendall(b"%x\r\n%b\r\n" % (len(event), event))
            done = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
            sock.sendall(b"%x\r\n%b\r\n0\r\n\r\n" % (len(done), done))

    class Server(socketserver.ThreadingTCPServer):
        daemon_threads = True
        allow_reuse_address = True

    with Server(("127.0.0.1", port), Connection) as server:
        server.serve_forever()


# ---- watchers ----------------------------------------------------------------------------------------


class Watchers:
    """The daemon's RSS, /v1/models latency and a paced stream's token gaps, each timestamped."""

    def __init__(self, url: str, backend_url: str, pid: int) -> None:
        self.url, self.backend_url, self.pid = url, backend_url, pid
        self.rss: list[tuple[float, float]] = []
        self.models: list[tuple[float, float]] = []  # (asked at, seconds), or seconds = inf on failure
        self.direct: list[tuple[float, float]] = []  # the same, straight to the backend: what the box gives
        self.gaps: list[tuple[float, float]] = []  # (arrived at, seconds since the previous token)
        self.direct_gaps: list[tuple[float, float]] = []  # the same, streamed straight from the backend
        self.stop = threading.Event()
        asking = [(url, samples, self.stop, MODELS_PERIOD_S) for url, samples in ((url, self.models),
                                                                                  (backend_url, self.direct))]
        self.threads = [threading.Thread(target=self._sample_rss, daemon=True),
                        *(threading.Thread(target=ask_models, args=args, daemon=True) for args in asking),
                        threading.Thread(target=self._stream, args=(self.url, self.gaps), daemon=True),
                        threading.Thread(target=self._stream, args=(self.backend_url, self.direct_gaps), daemon=True)]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(30)

    def _sample_rss(self) -> None:
        daemon = psutil.Process(self.pid)
        while not self.stop.is_set():
            self.rss.append((time.monotonic(), daemon.memory_info().rss / 1e6))
            self.stop.wait(0.05)

    def _stream(self, url: str, gaps: list[tuple[float, float]]) -> None:
        body = {"model": "bench", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        with httpx.Client(timeout=60) as client:
            while not self.stop.is_set():
                last = None
                with contextlib.suppress(httpx.HTTPError), client.stream(
                        "POST", f"{url}/v1/chat/completions", json=body,
                        headers={"x-bench-stream": "3000"}) as response:
                    for line in response.iter_lines():
                        if self.stop.is_set():
                            break
                        if line.startswith("data: {"):
                            now = time.monotonic()
                            if last is not None:
                                gaps.append((now, now - last))
                            last = now


def window(samples: list[tuple[float, float]], start: float, end: float) -> list[float]:
    return [value for at, value in samples if start <= at <= end]


# ---- the phases -------------------------------------------------------------------------------------


def partial_upload(port: int, declared: int, part: bytes | memoryview) -> dict[str, Any]:
    """Declare `declared` bytes, send `part` of them, then stop (the socket stays open) until answered."""
    started = time.monotonic()
    raw, sent_error = start_partial_upload(port, declared, part)
    with raw:
        try:
            answer = raw.recv(4096).decode(errors="replace")
        except OSError as exc:
            answer = type(exc).__name__
    return {"answer": answer.split("\r\n", 1)[0], "s": round(time.monotonic() - started, 1), "send": sent_error}


def repeated(times: int, send: Callable[[], Any]) -> Callable[[], list[Any]]:
    return lambda: [send() for _ in range(times)]


def phases(port: int, times: int) -> list[tuple[str, Callable[[], Any]]]:
    big, half, small = (small_objects_body(size) for size in (60_000_000, 30_000_000, 1_000_000))
    nest = deep_nest_body(200_000)
    part = memoryview(big)[:30_000_000]
    return [
        ("idle", lambda: time.sleep(5)),
        (f"one 60 MB body of small objects ({times} times)", repeated(times, lambda: post(port, big))),
        (f"three 30 MB bodies at once ({times} times)", repeated(times, lambda: at_once(3, lambda: post(port, half)))),
        (f"32 x 1 MB bodies at once ({times} times)", repeated(times, lambda: at_once(32, lambda: post(port, small)))),
        (f"a 200,000-deep nest ({times} times)", repeated(times, lambda: post(port, nest))),
        ("ten partial uploads (60 MB declared, 30 MB sent, then silence)",
         lambda: at_once(10, lambda: partial_upload(port, len(big), part))),
    ]


def watch_for_benchmark(url: str, backend_url: str, pid: int, out: Path) -> None:
    """The watchers in a process of their own (`--watch`), so the threads sending bodies never hold
    the interpreter they time with; their samples go to `out` once stdin closes."""
    watchers = Watchers(url, backend_url, pid)
    watchers.start()
    sys.stdin.read()
    watchers.close()
    out.write_text(json.dumps({"rss": watchers.rss, "models": watchers.models, "direct": watchers.direct,
                               "gaps": watchers.gaps, "direct_gaps": watchers.direct_gaps}))


def measure(url: str, backend_url: str, port: int, pid: int, times: int, root: Path) -> dict[str, Any]:
    samples_path = root / "samples.json"
    watcher = subprocess.Popen([sys.executable, __file__, "--watch", url, backend_url, str(pid), str(samples_path)],
                               stdin=subprocess.PIPE)
    time.sleep(3)  # the streams are flowing and the daemon warm
    results: list[tuple[dict[str, Any], float, float]] = []
    try:
        for name, run in phases(port, times):
            reset_peak(pid)
            before = memory_mb(pid)["VmRSS"]
            load = os.getloadavg()[0]
            cpu = sum(psutil.Process(pid).cpu_times()[:2])
            start = time.monotonic()
            answers = run()
            end = time.monotonic()
            peak = memory_mb(pid)["VmHWM"]
            row = {"phase": name, "seconds": round(end - start, 1), "rss_before_mb": round(before),
                   "peak_rss_mb": round(peak), "load_1min": round(load, 2),
                   "daemon_cpu_s": round(sum(psutil.Process(pid).cpu_times()[:2]) - cpu, 2), "answers": answers}
            print(json.dumps(row)[:400], flush=True)
            results.append((row, start, end))
        settled_at = None
        answered = time.monotonic()
        while time.monotonic() - answered < SETTLE_WATCH_S:
            if memory_mb(pid)["VmRSS"] < IDLE_BOUND_MB and settled_at is None:
                settled_at = time.monotonic() - answered
            time.sleep(0.5)
        after = memory_mb(pid)["VmRSS"]
    finally:
        assert watcher.stdin is not None
        watcher.stdin.close()
        watcher.wait(120)
    samples = {key: [tuple(pair) for pair in values] for key, values in json.loads(samples_path.read_text()).items()}
    for row, start, end in results:
        row |= {"models_ms": percentiles(window(samples["models"], start, end)),
                "models_failed": sum(1 for v in window(samples["models"], start, end) if v == float("inf")),
                "models_direct_ms": percentiles(window(samples["direct"], start, end)),
                "stream_gap_ms": percentiles(window(samples["gaps"], start, end)),
                "stream_gap_direct_ms": percentiles(window(samples["direct_gaps"], start, end))}
    rss = samples["rss"]
    return {"phases": [row for row, _, _ in results], "rss_after_60s_mb": round(after),
            "back_under_idle_bound_s": None if settled_at is None else round(settled_at, 1),
            "rss_timeline": [(round(t - rss[0][0], 2), round(v)) for t, v in rss[::10]],
            "overall_peak_rss_mb": max(row["peak_rss_mb"] for row, _, _ in results)}


@contextmanager
def running(root: Path, specd_from: Path) -> Iterator[tuple[str, str, int, int]]:
    backend_port, specd_port = free_port(), free_port()
    with ExitStack() as stack:
        stack.enter_context(process([sys.executable, __file__, "--serve-backend", str(backend_port)],
                                    root / "backend.log"))
        wait_http(f"http://127.0.0.1:{backend_port}/health")
        daemon = stack.enter_context(process([sys.executable, "-m", "specd", "daemon"], root / "daemon.log",
                                             env=daemon_home(root, backend_port, specd_port, specd_from),
                                             cwd=str(specd_from)))
        try:
            wait_http(f"http://127.0.0.1:{specd_port}/health", 60)
        except RuntimeError:
            print((root / "daemon.log").read_text()[-3000:], file=sys.stderr)
            raise
        yield f"http://127.0.0.1:{specd_port}", f"http://127.0.0.1:{backend_port}", specd_port, daemon.pid
        print((root / "daemon.log").read_text()[-2000:], file=sys.stderr)


def provenance(specd_from: Path) -> dict[str, Any]:
    commit = subprocess.run(["git", "-C", str(specd_from), "rev-parse", "--short", "HEAD"], check=False,
                            capture_output=True, text=True).stdout.strip() or "(not a git checkout)"
    dirty = subprocess.run(["git", "-C", str(specd_from), "status", "--porcelain", "--", "specd"], check=False,
                           capture_output=True, text=True).stdout.strip()
    return {"command": shlex.join(["python", *sys.argv]),
            "machine": f"{platform.node()}: {platform.platform()}, {psutil.cpu_count()} CPUs, "
                       f"{round(psutil.virtual_memory().total / 2**30)} GiB",
            "uname": " ".join(platform.uname()),
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "specd_from": str(specd_from), "specd_commit": commit + ("+uncommitted" if dirty else ""),
            "python": sys.version.split()[0], "load_avg_start": os.getloadavg()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--specd-from", type=Path, default=REPO,
                        help="the checkout whose `specd daemon` is measured (another commit, for a baseline)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--repeat", type=int, default=5, help="each body phase, one after another (more samples)")
    parser.add_argument("--serve-backend", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--watch", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_backend:
        serve_draining_backend_for_benchmark(args.serve_backend)
        return
    if args.watch:
        watch_for_benchmark(args.watch[0], args.watch[1], int(args.watch[2]), Path(args.watch[3]))
        return
    report = provenance(args.specd_from)
    with tempfile.TemporaryDirectory(prefix="specd-hostile-") as tmp, \
            running(Path(tmp), args.specd_from.resolve()) as (url, backend_url, port, pid):
        report |= measure(url, backend_url, port, pid, args.repeat, Path(tmp))
    report["load_avg_end"] = os.getloadavg()
    print(json.dumps({k: v for k, v in report.items() if k != "rss_timeline"}, indent=2))
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
