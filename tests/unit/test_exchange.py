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


def test_the_traffic_row_of_a_whole_answer_carries_its_shape_usage_and_timings() -> None:
    from specd.traffic.shape import RequestShape

    shape = RequestShape(sampling='{"temperature":0.7}', conversation="c0ffee", turn=2, stream=False,
                         task_class="edit")
    exchange = Exchange("/v1/chat/completions", 3, lambda *_: None, shape=shape)
    exchange.profile = "mtp"
    exchange.absorb({"usage": {"prompt_tokens": 40, "completion_tokens": 7},
                     "timings": {"prompt_n": 38, "prompt_ms": 12.5, "predicted_n": 7, "predicted_ms": 70.0,
                                 "draft_n": 6, "draft_n_accepted": 4}})
    row = exchange.to_record("llama.service", 200, 0.25, None)
    assert (row.unit, row.profile, row.in_flight, row.task_class, row.stream, row.status) == (
        "llama.service", "mtp", 3, "edit", False, 200)
    assert row.total_ms == 250.0
    assert (row.prompt_tokens, row.completion_tokens) == (40, 7)
    assert (row.prompt_n, row.prompt_ms, row.predicted_n, row.predicted_ms) == (38, 12.5, 7, 70.0)
    assert (row.draft_n, row.draft_n_accepted) == (6, 4)
    assert (row.sampling, row.conversation, row.turn, row.shape_unknown) == ('{"temperature":0.7}', "c0ffee", 2, None)
    unread = Exchange("/v1/chat/completions", 0, lambda *_: None, shape=RequestShape(unknown="body over 8 bytes"))
    assert unread.to_record("u", 200, 0.1, None).shape_unknown == "body over 8 bytes"


def test_a_streams_output_length_comes_from_usage_else_timings_else_its_token_events() -> None:
    from specd.traffic.shape import RequestShape

    def streamed(*events: bytes) -> int | None:
        exchange = Exchange("/v1/chat/completions", 1, lambda *_: None, shape=RequestShape(stream=True))
        exchange.scan(b"".join(events))
        return exchange.to_record("u", 200, 1.0, None).completion_tokens

    tokens = (delta("a"), delta("b"), delta("c"))
    assert streamed(*tokens, event({"choices": [], "usage": {"completion_tokens": 3},
                                    "timings": {"predicted_n": 5}})) == 3  # usage says it
    assert streamed(*tokens, event({"choices": [], "timings": {"predicted_n": 5}})) == 5  # then the timings
    assert streamed(*tokens) == 3  # then the token events counted
    whole = Exchange("/v1/chat/completions", 1, lambda *_: None)  # not a stream, no usage: not known
    assert whole.to_record("u", 200, 1.0, None).completion_tokens is None


def test_an_exchange_is_recorded_once_however_often_it_is_finished() -> None:
    """Several paths may end one request (a reject, then the client's leave): the traffic row and the
    in-flight count must be told once."""
    told: list[tuple[int, str | None]] = []
    exchange = Exchange.of_request("POST", "/v1/chat/completions", 0, lambda _, status, __, error: told.append(
        (status, error)))
    exchange.finish(503, "held too long")
    exchange.finish(499, "client went away")
    assert told == [(503, "held too long")]


def test_an_exchange_starts_when_its_request_was_whole_not_when_it_was_made() -> None:
    received = time.perf_counter() - 0.5
    exchange = Exchange.of_request("POST", "/v1/completions", 0, lambda *_: None, started=received)
    assert exchange.started == received
