"""Warm a new server's prompt cache before the blue-green flip.

A server that has just loaded has an empty prompt cache: the first request of every client after a
flip pays the whole prompt's prefill again, which the old server had cached (an agent's long
system prompt, a chat's history). Measured on this project's 2-core box with the tiny model, the
first wave after each flip waited about 50 ms more than requests away from a switch
(`benchmarks/results/switch-wait-history/`). So before the proxy's backend changes, the daemon
sends the new server the most recent distinct generation requests it proxied — each as a
one-token, non-streamed request, all at once so they land in separate slots — within a bounded
time; the clients' next requests find their prefixes cached.

The requests are held in memory only, the last `KEEP` of them up to `MAX_BODY_BYTES` each;
nothing is written (body capture keeps its own setting).
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

log = logging.getLogger(__name__)

KEEP = 32  # recent requests remembered (bodies in memory)
DISTINCT = 8  # at most this many distinct prompts are replayed, the newest first
MAX_BODY_BYTES = 1 << 20  # a bigger request is not remembered
WARM_BUDGET_S = 15.0  # the flip waits at most this long for the warm-up
GENERATION_ENDPOINTS = frozenset({"/v1/completions", "/v1/chat/completions", "/completion", "/completions",
                                  "/chat/completions"})
PROMPT_KEYS = ("messages", "prompt")


@dataclass(frozen=True)
class Recent:
    path: str
    document: dict[str, Any]


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

    def __init__(self, keep: int = KEEP) -> None:
        self._recent: deque[Recent] = deque(maxlen=keep)

    def note(self, path: str, document: dict[str, Any] | None, size: int) -> None:
        if document is not None and path in GENERATION_ENDPOINTS and size <= MAX_BODY_BYTES:
            self._recent.append(Recent(path, document))

    def distinct(self, limit: int = DISTINCT) -> list[Recent]:
        """The newest request of each distinct prompt (messages or prompt), newest first."""
        seen: set[str] = set()
        chosen: list[Recent] = []
        for recent in reversed(self._recent):
            prompt = next((recent.document[key] for key in PROMPT_KEYS if key in recent.document), None)
            if prompt is None:
                continue
            try:
                key = f"{recent.path}\0{json.dumps(prompt, sort_keys=True, default=str)}"
            except (RecursionError, ValueError, TypeError):  # nested too deep to compare: not worth warming
                continue
            if key not in seen:
                seen.add(key)
                chosen.append(recent)
            if len(chosen) == limit:
                break
        return chosen


def one_token(document: dict[str, Any]) -> dict[str, Any]:
    """The request as a warm-up: the same prompt and settings, one token, not streamed."""
    warm = {key: value for key, value in document.items()
            if key not in ("stream", "stream_options", "max_completion_tokens", "n")}
    warm.update(stream=False, max_tokens=1, n_predict=1)
    return warm


async def warm_up(base_url: str, requests: list[Recent], *, api_key: str | None = None,
                  budget_s: float = WARM_BUDGET_S, transport: httpx.AsyncBaseTransport | None = None) -> Warmed:
    """Send each request once to `base_url`, all at once; whatever has not answered within the
    budget is abandoned (the flip goes on: a cold cache is slower, not wrong)."""
    if not requests:
        return Warmed(0, 0, 0.0)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    started = time.monotonic()
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=budget_s, transport=transport) as client:
        async def send(recent: Recent) -> bool:
            try:
                return (await client.post(recent.path, json=one_token(recent.document))).status_code == 200
            except httpx.HTTPError as exc:
                log.info("warm-up request to %s%s: %s", base_url, recent.path, exc)
                return False

        tasks = [asyncio.ensure_future(send(recent)) for recent in requests]
        done, pending = await asyncio.wait(tasks, timeout=budget_s)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    return Warmed(len(requests), sum(1 for task in done if task.result()), time.monotonic() - started)
