"""Speculation seen working, from the server's own counters on `/metrics`.

vLLM's answers carry no `timings`, so what it drafted can only be read from its Prometheus counters
(`vllm:spec_decode_num_draft_tokens_total`, `vllm:spec_decode_num_accepted_tokens_total`); newer
llama.cpp builds publish the same counters as `llamacpp:spec_decode_*`. Both are read the same way:
a snapshot before and after a stretch of requests, the difference is what those requests drafted
(the server was serving only them). Parsed with prometheus_client's own parser; several label sets
(vLLM's `engine="0"`, ...) are summed.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

from specd.engines.facts import EngineFacts


@dataclass(frozen=True)
class SpecCounters:
    """Draft tokens proposed and accepted, as the server counts them."""

    drafted: int
    accepted: int

    def __sub__(self, earlier: SpecCounters) -> SpecCounters:
        return SpecCounters(self.drafted - earlier.drafted, self.accepted - earlier.accepted)

    def __add__(self, other: SpecCounters) -> SpecCounters:
        return SpecCounters(self.drafted + other.drafted, self.accepted + other.accepted)


def _sample_sums(text: str) -> dict[str, float]:
    sums: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                sums[sample.name] = sums.get(sample.name, 0.0) + float(sample.value)
    except ValueError:
        return {}
    return sums


def parse_counters(text: str, facts: EngineFacts) -> SpecCounters | None:
    """The two counters from a /metrics page; None when this server publishes no speculative counters
    (a build without them, or a server not speculating: vLLM only registers them with a speculator)."""
    sums = _sample_sums(text)
    if facts.drafted_counter not in sums:
        return None
    return SpecCounters(int(sums[facts.drafted_counter]), int(sums.get(facts.accepted_counter, 0.0)))


def gauge(text: str, name: str) -> float | None:
    """One metric's value on a /metrics page (its label sets summed); None when the page lacks it."""
    return _sample_sums(text).get(name)


def in_progress(text: str, facts: EngineFacts) -> int | None:
    """Requests running plus queued, from the engine's gauges; None when the page has none of them."""
    sums = _sample_sums(text)
    found = [sums[name] for name in facts.in_progress_metrics if name in sums]
    return int(sum(found)) if found else None


def read_counters(client: httpx.Client, base_url: str, facts: EngineFacts,
                  api_key: str | None = None) -> SpecCounters | None:
    """The counters of the server at `base_url` now; None when it does not answer or has none."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        answer = client.get(f"{base_url}/metrics", headers=headers)
    except httpx.HTTPError:
        return None
    return parse_counters(answer.text, facts) if answer.status_code == 200 else None
