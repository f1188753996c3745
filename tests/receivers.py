"""Local HTTP receivers for notification tests: one that records what it is sent, one that never
answers (a hung service), one that answers 500. Loopback only, stopped by the test."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

Behaviour = Literal["record", "hang", "fail"]


class Receiver(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, behaviour: Behaviour) -> None:
        self.behaviour = behaviour
        self.received: list[dict[str, Any]] = []
        self.connections = 0
        self.release = threading.Event()  # lets hung handlers go when the test ends
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.server_address[1]}"

    def wait_for(self, what: str, condition: Any, timeout_s: float = 120.0) -> Any:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = condition(self.received)
            if found:
                return found
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}; received: {json.dumps(self.received, indent=1)[:4000]}")


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        self.server.connections += 1
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.server.behaviour == "hang":
            self.server.release.wait(300)
            return
        if self.server.behaviour == "fail":
            self.send_response(500)
            self.end_headers()
            return
        try:
            payload = json.loads(body)
        except ValueError:
            payload = {"raw": body.decode(errors="replace")}
        self.server.received.append(payload)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format: str, *args: Any) -> None:
        return


@contextmanager
def receiver(behaviour: Behaviour = "record") -> Iterator[Receiver]:
    server = Receiver(behaviour)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()
        thread.join(10)
