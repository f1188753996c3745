"""Warm a new server's prompt cache before the blue-green flip.

A server that has just loaded has an empty prompt cache: the first request of every client after a
flip pays the whole prompt's prefill again, which the old server had cached (an agent's long
system prompt, a chat's history). Measured on this project's 2-core box with the tiny model, the
first wave after each flip waited about 50 ms more than requests away from a switch
(`benchmarks/results/switch-wait-history/`). So before the proxy's backend changes, the daemon
sends the new server the most recent distinct generation requests it proxied — each as a
one-token, non-streamed request, all at once so they land in separate slots — within a bounded
time; the clients' next requests find their prefixes cached.

The requests are held in memory only, as the bytes the client sent (a parsed body costs many
times its size: the 32 newest 1 MB bodies of small objects held as documents kept the daemon at
1.4 GB), the last `KEEP` of them up to `MAX_BODY_BYTES` each and `KEPT_BYTES` in all; they are
parsed again only for a warm-up, on a thread. Nothing is written (body capture keeps its own
setting).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import httpx

from specd.proxy.http1.bodies import Body
from specd.traffic.shape import RequestShape

log = logging.getLogger(__name__)

KEEP = 32  # recent requests remembered (bodies in memory)
DISTINCT = 8  # at most this many distinct prompts are replayed, the newest first
MAX_BODY_BYTES = 1 << 20  # a bigger request is not remembered
KEPT_BYTES = 8 << 20  # the bodies remembered, in all (the oldest go first)
WARM_BUDGET_S = 15.0  # the flip waits at most this long for the warm-up
GENERATION_ENDPOINTS = frozenset({"/v1/completions", "/v1/chat/completions", "/completion", "/completions",
                                  "/chat/completions"})
PROMPT_KEYS = ("messages", "prompt")
JSON = {"Content-Type": "application/json"}


@dataclass(frozen=True)
class Recent:
    path: str
    body: bytes  # as the client sent it: a JSON object


@dataclass(frozen=True)
class Warmed:
    sent: int
    answered: int
    seconds: float

    def describe(self) -> str:
        if not self.sent:
            return "no recent request to warm the new server's prompt cache with"
        return (f"warmed the new server's prompt cache with {self.answered} of {self.sent} recent prompt(s) "
                f"in {self.seconds:.1f} s")


class RecentRequests:
    """The proxy's last generation requests, for the next warm-up (a deque append per request)."""

    def __init__(self, keep: int = KEEP, kept_bytes: int = KEPT_BYTES) -> None:
        self._recent: deque[Recent] = deque()
        self._keep, self._kept_bytes = keep, kept_bytes
        self._bytes = 0

    def note(self, path: str, shape: RequestShape, body: Body) -> None:
        """Remember a request whose body was read as a JSON object (`shape`)."""
        if body and shape.read and path in GENERATION_ENDPOINTS and len(body) <= MAX_BODY_BYTES:
            self._recent.append(Recent(path, bytes(body)))
            self._bytes += len(body)
            while len(self._recent) > self._keep or self._bytes > self._kept_bytes:
                self._bytes -= len(self._recent.popleft().body)

    def newest(self) -> list[Recent]:
        """The requests remembered, newest first."""
        return list(reversed(self._recent))


def distinct(requests: list[Recent], limit: int = DISTINCT) -> list[tuple[Recent, dict[str, Any]]]:
    """The first request (with its document) of each distinct prompt (messages or prompt) among
    `requests`, in their order. Parses every body: run it off the event loop."""
    seen: set[str] = set()
    chosen: list[tuple[Recent, dict[str, Any]]] = []
    for recent in requests:
        try:
            document = json.loads(recent.body)
            prompt = next((document[key] for key in PROMPT_KEYS if key in document), None)
            key = f"{recent.path}\0{json.dumps(prompt, sort_keys=True, default=str)}"
        except (ValueError, TypeError, RecursionError):  # remembered bodies were read before: never expected
            continue
        if prompt is not None and key not in seen:
            seen.add(key)
            chosen.append((recent, document))
        if len(chosen) == limit:
            break
    return chosen


def one_token(document: dict[str, Any]) -> dict[str, Any]:
    """The request as a warm-up: the same prompt and settings, one token, not streamed."""
    warm = {key: value for key, value in document.items()
            if key not in ("stream", "stream_options", "max_completion_tokens", "n")}
    warm.update(stream=False, max_tokens=1, n_predict=1)
    return warm


def warm_up_bodies(requests: list[Recent]) -> list[tuple[str, bytes]]:
    """(path, one-token body) of each distinct prompt among `requests` (newest first)."""
    bodies = []
    for recent, document in distinct(requests):
        try:
            bodies.append((recent.path, json.dumps(one_token(document)).encode()))
        except (ValueError, RecursionError):  # nested too deep to write back out: not worth warming
            continue
    return bodies


async def warm_up(base_url: str, requests: list[Recent], *, api_key: str | None = None,
                  budget_s: float = WARM_BUDGET_S, transport: httpx.AsyncBaseTransport | None = None) -> Warmed:
    """Send the newest request of each distinct prompt among `requests` (`RecentRequests.newest`)
    once to `base_url`, all at once; whatever has not answered within the budget is abandoned (the
    flip goes on: a cold cache is slower, not wrong)."""
    started = time.monotonic()
    bodies = await asyncio.to_thread(warm_up_bodies, requests)
    if not bodies:
        return Warmed(0, 0, 0.0)
    headers = {"Authorization": f"Bearer {api_key}", **JSON} if api_key else JSON
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=budget_s, transport=transport) as client:
        async def send(path: str, body: bytes) -> bool:
            try:
                return (await client.post(path, content=body)).status_code == 200
            except httpx.HTTPError as exc:
                log.info("warm-up request to %s%s: %s", base_url, path, exc)
                return False

        tasks = [asyncio.ensure_future(send(path, body)) for path, body in bodies]
        done, pending = await asyncio.wait(tasks, timeout=budget_s)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    return Warmed(len(bodies), sum(1 for task in done if task.result()), time.monotonic() - started)
