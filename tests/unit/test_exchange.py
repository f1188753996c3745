"""What the traffic table gets from a streamed answer (specd.proxy.exchange.Exchange.scan): token events
counted, the time to the first one, the usage and timings of the final event. Pure: the proxy feeds the
scanner the backend's bytes as they pass; its end-to-end path is tests/unit/test_proxy.py's. Written from
mutants of `scan` that lived through the socket tests (benchmarks/results/mutation-proxy.md)."""

from __future__ import annotations

import json
import time

from specd.proxy.exchange import Exchange


def event(document: dict[str, object]) -> bytes:
    return b"data: " + json.dumps(document).encode() + b"\n\n"


def delta(text: str) -> bytes:
    return event({"choices": [{"delta": {"content": text}}]})


def test_a_stream_counts_its_token_events_and_keeps_the_final_usage_and_timings() -> None:
    started = time.perf_counter() - 0.25  # the request was in 250 ms before its first token
    exchange = Exchange("/v1/chat/completions", 1, lambda *_: None, started=started)
    before = time.perf_counter()
    exchange.scan(b": keep-alive comment\n\n" + delta("Hel") + delta("lo"))  # a comment line first
    after = time.perf_counter()
    first = exchange.ttft_ms
    exchange.scan(delta(" world") + event({"choices": [{"delta": {}}], "usage": {"completion_tokens": 3}}))
    exchange.scan(event({"choices": [], "timings": {"predicted_n": 3, "draft_n": 2}}) + b"data: [DONE]\n\n")
    assert exchange.events == 3
    assert first is not None and 1000 * (before - started) <= first <= 1000 * (after - started)  # ms from the start
    assert exchange.ttft_ms == first  # the first token's time, not a later one's
    assert exchange.usage == {"completion_tokens": 3}
    assert exchange.timings == {"predicted_n": 3, "draft_n": 2}
