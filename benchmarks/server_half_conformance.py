"""The cases issue 32's probes found, run against both server halves proxy_overhead.py compares.

    python benchmarks/server_half_conformance.py [--out benchmarks/results/server-half-conformance.md]

`front` (specd's hand-written server) and `uvicorn` (uvicorn's HttpToolsProtocol with a raw ASGI
app), each forwarding with specd's upstream client to a FAKE scripted backend
(tests/fakes/http1_raw.py) that keeps every raw request it reads: for each case, what the client got
and whether the backend saw what it must not. The same cases are pass/fail tests for specd's
server in tests/unit/test_http1_conformance.py; here they say what retiring that server for
uvicorn's would bring back. Prints a table; asserts nothing.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.fakes.http1_raw import FakeScriptedBackend, Talk, talk
from tests.fakes.proxy_fakes import free_port

OK = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 2\r\n\r\nok"
TRAILER = (b"POST /t HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n"
           b"Authorization: Bearer smuggled\r\n\r\n")


def status(result: Talk) -> str:
    return str(result.answers[0].status) if result.answers else ("closed, no answer" if result.closed else "none")


def cases(backend: FakeScriptedBackend) -> dict[str, Callable[[int], str]]:
    def trailer(port: int) -> str:
        before = len(backend.requests)
        got = status(talk(port, TRAILER))
        forwarded = b"smuggled" in b"".join(backend.requests[before:])
        return f"{got}; trailer {'forwarded to the backend as a header' if forwarded else 'not forwarded'}"

    def header(size: int) -> Callable[[int], str]:
        return lambda port: status(talk(port, b"GET /ok HTTP/1.1\r\nHost: x\r\nCookie: " + b"x" * size + b"\r\n\r\n",
                                        until_closed=False))

    def target(port: int) -> str:
        return status(talk(port, b"GET /ok?q=" + b"a" * 10_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n"))

    def big_header_stall(port: int) -> str:
        """A 16 MiB header: how long the server takes to answer it (quadratic parsing shows here)."""
        started = time.perf_counter()
        try:
            got = status(talk(port, [b"GET /ok HTTP/1.1\r\nHost: x\r\nX-Big: "] + [b"z" * 65536] * 256
                              + [b"\r\n\r\n"], timeout_s=120))
        except TimeoutError:
            return "no answer within 120 s"
        return f"{got} after {time.perf_counter() - started:.1f} s"

    return {"request trailer Authorization": trailer, "64 KiB Cookie header": header(64 * 1024),
            "10 KB request target": target, "16 MiB header": big_header_stall}


def run(kind: str, backend: FakeScriptedBackend) -> dict[str, str]:
    port = free_port()
    child = subprocess.Popen([sys.executable, str(REPO / "benchmarks" / "forwarders.py"), kind, str(port),
                              str(backend.port)], env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/ok", timeout=2)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        return {name: case(port) for name, case in cases(backend).items()}
    finally:
        child.kill()  # uvicorn's graceful stop waits for connections a case left open
        child.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    backend = FakeScriptedBackend()
    backend.scripts[b"/ok"] = OK
    backend.scripts[b"/t"] = OK
    try:
        results = {kind: run(kind, backend) for kind in ("front", "uvicorn")}
    finally:
        backend.stop()
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            check=False).stdout.strip()
    lines = ["# The server halves against issue 32's cases", "",
             f"- command: `python {' '.join(sys.argv)}`",
             (f"- machine: {platform.node()}: {platform.platform()}, {psutil.cpu_count()} CPUs; Python "
              f"{sys.version.split()[0]}; specd at {commit}; 1-minute load average {psutil.getloadavg()[0]:.1f}"),
             f"- date: {datetime.datetime.now(datetime.UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}",
             ("- what: `front` (specd's hand-written server) and `uvicorn` (uvicorn's HttpToolsProtocol, a raw ASGI "
              "app), each forwarding with specd's upstream client (benchmarks/forwarders.py) to a FAKE scripted "
              "backend that records every raw request; truth: what the backend read, and RFC 9110/9112 and nginx's "
              "limits (414 past 8 KiB of target, 431 past 32 KiB of head)"),
             "", "| case | front | uvicorn |", "|---|---|---|"]
    lines += [f"| {name} | {results['front'][name]} | {results['uvicorn'][name]} |" for name in results["front"]]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
