"""How many requests a llama-server is working on right now, asked of the server itself.

A blue-green switch stops the old server only once the streams it was serving have finished, and
a shadow bench marks each sample with the live server's load; both need the server's own count,
which sees every client (the proxy's and anyone talking to the port directly). llama-server
reports it two ways: `/slots` (on by default; `--no-slots` turns it off) lists each slot with
`is_processing`, and `/metrics` (with `--metrics`) has `llamacpp:requests_processing` and
`llamacpp:requests_deferred` (accepted, waiting for a slot). The count is the processing slots
plus the deferred requests, from whichever endpoints answer; None when neither does. vLLM has no
`/slots`: its `vllm:num_requests_running` and `vllm:num_requests_waiting` count (specd.engines.facts).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from specd.engines.facts import LLAMA_SERVER, VLLM
from specd.engines.metrics import gauge, in_progress

_DEFERRED = LLAMA_SERVER.counter("requests_deferred")


def _processing_slots(client: httpx.Client, url: str, headers: dict[str, str]) -> int | None:
    try:
        slots = client.get(url, headers=headers)
        listed = slots.json() if slots.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    if not isinstance(listed, list):
        return None
    return sum(1 for entry in listed if isinstance(entry, dict) and entry.get("is_processing"))


def _metrics_page(client: httpx.Client, url: str, headers: dict[str, str]) -> str | None:
    try:
        metrics = client.get(url, headers=headers)
    except httpx.HTTPError:
        return None
    return metrics.text if metrics.status_code == 200 else None


def requests_in_progress(client: httpx.Client, base_url: str, api_key: str | None = None) -> int | None:
    """Requests the server at `base_url` is processing or has queued; None when it cannot say."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    processing = _processing_slots(client, f"{base_url}/slots", headers)
    page = _metrics_page(client, f"{base_url}/metrics", headers)
    if page is None:
        return processing
    if processing is not None:
        return processing + int(gauge(page, _DEFERRED) or 0)
    for facts in (LLAMA_SERVER, VLLM):  # no /slots (--no-slots, or vLLM): the gauges count running and queued
        counted = in_progress(page, facts)
        if counted is not None:
            return counted
    return None


@dataclass(frozen=True)
class Drained:
    idle: bool | None  # True: nothing left; False: still busy at the timeout; None: the server cannot say
    waited_s: float
    busy_at_start: int | None


def wait_until_idle(client: httpx.Client, base_url: str, *, api_key: str | None = None, timeout_s: float,
                    quiet_s: float = 0.2, poll_s: float = 0.1, clock: Callable[[], float] = time.monotonic,
                    sleep: Callable[[float], None] = time.sleep) -> Drained:
    """Wait until the server has had no request in progress for `quiet_s` (a request that reached it
    just before the proxy moved on is seen), or `timeout_s` passed."""
    started = clock()
    first = requests_in_progress(client, base_url, api_key)
    if first is None:
        return Drained(None, 0.0, None)
    quiet_since: float | None = started if first == 0 else None
    while True:
        now = clock()
        if quiet_since is not None and now - quiet_since >= quiet_s:
            return Drained(True, now - started, first)
        if now - started >= timeout_s:
            return Drained(False, now - started, first)
        sleep(poll_s)
        busy = requests_in_progress(client, base_url, api_key)
        if busy is None:  # the server went away (or stopped answering): nothing more to wait for
            return Drained(True, clock() - started, first)
        if busy:
            quiet_since = None
        elif quiet_since is None:
            quiet_since = clock()
