"""What the proxy records about one request: its shape, filled in as it goes, reported once.

The tuner weighs profiles by this shape (endpoint, stream, task class, token counts, llama-server's
`timings`), never by content or headers. Reading it costs the request path as little as possible:
the body's shape is read once, with bounded work (specd.traffic.shape.read_shape; a big body off
the event loop, specd.proxy.bodies), and only the shape is kept, never the parsed document; a
stream is scanned only for token events and the final event's usage/timings, and the row itself is
handed to the `Recorder`, whose writer thread does the SQLite work (specd.traffic.recorder).
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable
from typing import Any

from specd.proxy.metrics import ProxyMetrics, route_label
from specd.traffic.records import Recorder, TrafficRecord
from specd.traffic.shape import RequestShape

log = logging.getLogger(__name__)

_TOKEN_EVENT = re.compile(rb'"(?:reasoning_content|content|text)": ?"[^"]')


class Exchange:
    """One request's shape, filled in as it goes; `finish` reports it exactly once."""

    def __init__(self, endpoint: str, in_flight: int, on_finish: Callable[[Exchange, int, float, str | None], None],
                 started: float | None = None, shape: RequestShape | None = None) -> None:
        self.started = time.perf_counter() if started is None else started  # when the whole request was in
        self.ts = time.time()
        self.endpoint, self.in_flight = endpoint, in_flight
        self.shape = RequestShape()  # the body's (specd.traffic.shape); `take` fills it in once read
        self.stream = False
        if shape is not None:
            self.take(shape)
        self._on_finish = on_finish
        self.held_ms = 0.0
        self.ttft_ms: float | None = None
        self.events = 0
        self.usage: dict[str, Any] = {}
        self.timings: dict[str, Any] = {}
        self.profile: str | None = None
        self.error: str | None = None
        self.failed_status: int | None = None  # set when a started stream ends in error
        self.recorded = True  # goes into the traffic table (proxied POSTs; metrics count everything)
        self.done = False

    @classmethod
    def of_request(cls, method: str, endpoint: str, in_flight: int,
                   on_finish: Callable[[Exchange, int, float, str | None], None], *, started: float | None = None
                   ) -> Exchange:
        """The exchange a request starts (its body's shape is `take`n once read)."""
        exchange = cls(endpoint, in_flight, on_finish, started)
        exchange.recorded = method == "POST"  # GET /v1/models, /health polls are not traffic
        return exchange

    def hold_ended(self, at: float | None = None) -> None:
        """The request's wait before it was sent (or refused) ended `at` (time.perf_counter(); None: now)."""
        self.held_ms = 1000.0 * ((time.perf_counter() if at is None else at) - self.started)

    def take(self, shape: RequestShape) -> None:
        """The body's shape, once read."""
        self.shape, self.stream = shape, shape.stream

    def absorb(self, document: Any) -> None:
        if isinstance(document, dict):
            if isinstance(document.get("usage"), dict):
                self.usage = document["usage"]
            if isinstance(document.get("timings"), dict):
                self.timings = document["timings"]

    def scan(self, chunk: bytes) -> None:
        """Note token events (TTFT, count) and the usage/timings a final event carries."""
        for event in chunk.split(b"\n\n"):
            if not event.startswith(b"data: ") or event.startswith(b"data: [DONE]"):
                continue
            if _TOKEN_EVENT.search(event):
                self.events += 1
                if self.ttft_ms is None:
                    self.ttft_ms = 1000.0 * (time.perf_counter() - self.started)
            if b'"timings"' in event or b'"usage"' in event:
                self.absorb(json_object(event[6:]))

    def to_record(self, unit: str, status: int, total_s: float, error: str | None) -> TrafficRecord:
        usage, timings = self.usage, self.timings
        completion = _int(usage.get("completion_tokens"))
        if completion is None and self.stream and self.events:
            completion = _int(timings.get("predicted_n")) or self.events
        shape = self.shape
        return TrafficRecord(
            ts=self.ts, endpoint=self.endpoint, stream=self.stream, status=status, total_ms=1000.0 * total_s,
            unit=unit, profile=self.profile, in_flight=self.in_flight,
            task_class=shape.task_class,
            prompt_tokens=_int(usage.get("prompt_tokens")), completion_tokens=completion,
            ttft_ms=self.ttft_ms, held_ms=self.held_ms,
            prompt_n=_int(timings.get("prompt_n")), prompt_ms=_float(timings.get("prompt_ms")),
            predicted_n=_int(timings.get("predicted_n")), predicted_ms=_float(timings.get("predicted_ms")),
            draft_n=_int(timings.get("draft_n")), draft_n_accepted=_int(timings.get("draft_n_accepted")),
            error=error, sampling=shape.sampling, conversation=shape.conversation, turn=shape.turn,
            shape_unknown=shape.unknown,
        )

    def finish(self, status: int, error: str | None = None) -> None:
        if self.done:
            return
        self.done = True
        try:
            self._on_finish(self, status, time.perf_counter() - self.started, self.error or error)
        except Exception:  # what is counted and recorded must never fail the request it describes
            log.exception("recording a finished request failed; the request is unaffected")


class Recording:
    """Where a finished exchange goes: the metrics at once, the traffic row to the Recorder's queue."""

    def __init__(self, unit: str, recorder: Recorder | None, metrics: ProxyMetrics | None) -> None:
        self.unit, self._recorder, self._metrics = unit, recorder, metrics
        self._counted: dict[tuple[str, int], Any] = {}  # metric children by label: a lookup, not a labels() call

    def __call__(self, exchange: Exchange, status: int, total_s: float, error: str | None) -> None:
        if log.isEnabledFor(logging.DEBUG):  # the path only: a query string may carry an API key
            log.debug("forwarded %s: %d in %.1f ms%s", exchange.endpoint, status, 1000 * total_s,
                      f" ({error})" if error else "")
        if self._metrics is not None:
            route = route_label(exchange.endpoint)
            children = self._counted.get((route, status))
            if children is None:
                children = self._counted[route, status] = (self._metrics.requests.labels(route, str(status)),
                                                           self._metrics.latency.labels(route))
            children[0].inc()
            children[1].observe(total_s)
            if exchange.ttft_ms is not None:
                self._metrics.ttft.observe(exchange.ttft_ms / 1000.0)
        if self._recorder is not None and exchange.recorded:
            self._recorder.record(exchange.to_record(self.unit, status, total_s, error))


def json_object(data: bytes) -> dict[str, Any] | None:
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):  # deep nesting: "[[[[..." is not a request
        return None
    return document if isinstance(document, dict) else None


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
