"""Issue 36's hostile request bodies, the raw-socket clients that send them, and the daemon's memory
as the kernel counts it: one definition for the fault test (tests/system/test_fault_hostile_burst.py)
and the benchmark (benchmarks/hostile_bodies.py).

The clients are raw sockets: `sendall` leaves the interpreter, so a sender's own CPU stays out of the
way of what is measured, and a client can stop halfway through its body, which no HTTP library does.
"""

from __future__ import annotations

import socket
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import httpx

SMALL_OBJECT = b'{"k":1},'
T = TypeVar("T")


def small_objects_body(size: int, model: str = "bench") -> bytes:
    """A chat body of `size` bytes whose padding is small JSON objects (a field llama-server ignores)."""
    head = (b'{"model":"%b","messages":[{"role":"user","content":"hi"}],"max_tokens":4,"x_items":['
            % model.encode())
    tail = b'{"k":1}]}'
    count = max(0, (size - len(head) - len(tail)) // len(SMALL_OBJECT))
    return head + SMALL_OBJECT * count + tail


def deep_nest_body(depth: int, model: str = "bench") -> bytes:
    """A chat body holding a `depth`-deep nest of arrays in a field llama-server ignores."""
    return (b'{"model":"%b","messages":[{"role":"user","content":"hi"}],"max_tokens":4,"x_nest":' % model.encode()
            + b"[" * depth + b"]" * depth + b"}")


def request_head(content_length: int) -> bytes:
    return (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {content_length}\r\n\r\n").encode()


def length_of(received: bytes) -> int:
    """The Content-Length of the answer whose head `received` begins with (0 when it names none)."""
    head = received.split(b"\r\n\r\n", 1)[0].lower()
    return int(head.split(b"content-length: ", 1)[1].split(b"\r\n", 1)[0]) if b"content-length: " in head else 0


def post(port: int, body: bytes) -> dict[str, Any]:
    """One POST on a fresh connection, read to the end of its answer: its status, seconds, whether the
    answer said `connection: close`, and the start of its body."""
    started = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=300) as sock:
            sock.sendall(request_head(len(body)))
            sock.sendall(body)
            received = b""
            while b"\r\n\r\n" not in received or len(received.split(b"\r\n\r\n", 1)[1]) < length_of(received):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                received += chunk
    except OSError as exc:
        return {"status": type(exc).__name__, "s": round(time.monotonic() - started, 2)}
    status = received.split(b" ", 2)[1].decode() if received.startswith(b"HTTP/1.1 ") else "no answer"
    head, _, answer = received.partition(b"\r\n\r\n")
    return {"status": int(status) if status.isdigit() else status, "s": round(time.monotonic() - started, 2),
            "closed": b"\r\nconnection: close\r\n" in head.lower() + b"\r\n",
            "body": answer[:300].decode(errors="replace")}


def at_once(count: int, send: Callable[[], T]) -> list[T]:
    """`send()` from `count` threads at the same time; their results in order."""
    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(lambda _: send(), range(count)))


def start_partial_upload(port: int, declared: int, part: bytes | memoryview,
                         timeout_s: float = 150) -> tuple[socket.socket, str | None]:
    """Declare `declared` bytes, send `part` of them, then stop: the open socket (the caller closes it)
    and the error that ended the sending early, if the proxy refused the body mid-upload."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
    try:
        sock.sendall(request_head(declared))
        sock.sendall(part)
    except OSError as exc:  # refused mid-upload: the answer may still be readable
        return sock, type(exc).__name__
    return sock, None


def memory_mb(pid: int) -> dict[str, float]:
    """The process's resident memory now (VmRSS) and its high-water mark (VmHWM), in MiB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return {key: int(fields[key].split()[0]) / 1024 for key in ("VmRSS", "VmHWM")}


def reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # resets VmHWM to the current RSS (Linux >= 4.0)


def percentiles(values: list[float], scale: float = 1000.0) -> dict[str, float | int | None]:
    """n, p50, p99 and max of `values` (seconds), times `scale` (milliseconds by default)."""
    if not values:
        return {"n": 0, "p50": None, "p99": None, "max": None}
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return {"n": len(ordered), "p50": round(statistics.median(ordered) * scale, 1), "p99": round(p99 * scale, 1),
            "max": round(ordered[-1] * scale, 1)}


def ask_models(url: str, samples: list[tuple[float, float]], stop: threading.Event, period_s: float) -> None:
    """`GET url/v1/models` every `period_s` on one keep-alive connection until `stop`; each sample is
    (asked at, seconds to the answer), seconds = inf when it failed or was not a 200."""
    with httpx.Client(timeout=60) as client:
        while not stop.is_set():
            asked = time.monotonic()
            try:
                ok = client.get(f"{url}/v1/models").status_code == 200
            except httpx.HTTPError:
                ok = False
            samples.append((asked, time.monotonic() - asked if ok else float("inf")))
            stop.wait(max(0.0, period_s - (time.monotonic() - asked)))
