"""Clients that keep the daemon's proxy busy during a fault test, and what each one got back.

Each request carries a unique body, so a test can tell whether a given request reached the server
(the FAKE server logs each body's sha256) and how many requests the proxy's traffic log counted.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass
from typing import Self

import httpx


@dataclass(frozen=True)
class Sent:
    body_sha: str
    sent_at: float     # time.monotonic()
    answered_at: float
    status: int        # 0: no HTTP answer at all (connection refused or dropped)


def completion_body(text: str, max_tokens: int = 4) -> bytes:
    return json.dumps({"model": "tiny", "messages": [{"role": "user", "content": text}],
                       "max_tokens": max_tokens, "temperature": 0}).encode()


def post(client: httpx.Client, url: str, body: bytes) -> Sent:
    sent_at = time.monotonic()
    try:
        status = client.post(f"{url}/v1/chat/completions", content=body,
                             headers={"content-type": "application/json"}).status_code
    except httpx.HTTPError:
        status = 0
    return Sent(hashlib.sha256(body).hexdigest(), sent_at, time.monotonic(), status)


class Load:
    """`clients` threads sending small completions back to back to `url` until the block ends."""

    def __init__(self, url: str, clients: int, *, pause_s: float = 0.0) -> None:
        self.url, self.pause_s = url, pause_s
        self.sent: list[Sent] = []
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(n,), daemon=True) for n in range(clients)]

    def _run(self, client_number: int) -> None:
        with httpx.Client(timeout=180) as client:
            request_number = 0
            while not self.stop.is_set():
                sent = post(client, self.url, completion_body(f"client {client_number} request {request_number}: hi"))
                request_number += 1
                with self._lock:
                    self.sent.append(sent)
                self.stop.wait(self.pause_s)

    def __enter__(self) -> Self:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(200)

    def answered(self) -> list[Sent]:
        with self._lock:
            return list(self.sent)

    def served(self) -> int:
        return sum(s.status == 200 for s in self.answered())
