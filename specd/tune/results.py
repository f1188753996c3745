"""What a bench measured: one `Result` per request, a `Report` per bench, and turning an answer into a Result.

Every llama-server field is optional (`timings` is llama.cpp's, `usage` is OpenAI's): a server
that reports less still yields a wall clock. A result keeps its position in the bench's plan and its
round, so the tuner can pair the same request across profiles (specd.tune.paired).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from specd.engines.metrics import SpecCounters
from specd.traffic.taskclass import TaskClass
from specd.tune.perfmodel import Sample
from specd.tune.stats import Summary, summarize
from specd.tune.targets import Reply
from specd.tune.workloads import WorkloadRequest

SEED = 42
CHARS_PER_TOKEN = 4


@dataclass(frozen=True)
class Result:
    """One measured request. prefill_ms doubles as TTFT (non-streamed)."""

    profile: str
    request_index: int
    task_class: TaskClass
    prompt_tokens: int  # evaluated, i.e. not counting cache_n
    output_tokens: int  # reasoning tokens included
    prefill_ms: float
    decode_ms: float
    wall_ms: float
    draft_n: int | None = None
    draft_accepted: int | None = None
    vram_bytes: int | None = None
    concurrency: int = 1  # requests in flight when it started, itself included
    cache_n: int = 0  # prompt tokens reused from the prompt cache
    reasoning_tokens: int | None = None  # where the server reports reasoning apart from the answer
    has_timings: bool = True  # the answer carried llama-server's `timings` (draft_n is only read from there)
    position: int = 0  # its place in the bench's plan: the same request (prompt, seed) on every profile
    round: int = 0  # the round it ran in (the unit a disturbance hits together)
    box_load: float | None = None  # CPU pressure while it ran (specd.tune.noise); None: not seen
    live_load: int | None = None  # shadow bench: the most requests the live server served meanwhile

    @property
    def decode_tok_s(self) -> float | None:
        return 1000.0 * self.output_tokens / self.decode_ms if self.decode_ms > 0 else None

    @property
    def acceptance(self) -> float | None:
        return self.draft_accepted / self.draft_n if self.draft_n and self.draft_accepted is not None else None

    @property
    def prefill_no_reuse_ms(self) -> float:
        """Estimated prefill had nothing been reused: the measured per-token rate over the whole prompt."""
        if self.cache_n == 0 or self.prompt_tokens == 0:
            return self.prefill_ms
        return self.prefill_ms * (self.prompt_tokens + self.cache_n) / self.prompt_tokens

    def as_sample(self) -> Sample:
        return Sample(profile=self.profile, task_class=self.task_class,
                      prompt_tokens=self.prompt_tokens, output_tokens=self.output_tokens,
                      prefill_ms=self.prefill_ms, decode_ms=self.decode_ms, wall_ms=self.wall_ms,
                      draft_n=self.draft_n, draft_accepted=self.draft_accepted, concurrency=self.concurrency)


def _median(values: Sequence[float]) -> float | None:
    return summarize(values).median if values else None


@dataclass
class Report:
    workload: str
    profiles: list[str]
    results: dict[str, list[Result]] = field(default_factory=dict)
    stopped_early: dict[str, bool] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0
    run_id: int | None = None
    concurrency: int = 1
    cache_reuse: bool = False
    rounds: int = 0
    switches: int = 0
    traffic: dict[str, Any] = field(default_factory=dict)  # bench_traffic: what was replayed, and how
    stop_reason: str = ""  # why sampling ended
    left: dict[str, str] = field(default_factory=dict)  # profile -> why it left the rotation early
    failed: dict[str, str] = field(default_factory=dict)  # profile -> the step that failed and why
    box_load_seen: bool = True  # whether CPU pressure could be read
    # The server's own speculative counters over each profile's measured requests (specd.engines.metrics):
    # how vLLM, whose answers carry no `timings`, is seen drafting; and which engine served each profile.
    counters: dict[str, SpecCounters] = field(default_factory=dict)
    engines: dict[str, str] = field(default_factory=dict)

    def walls(self, profile: str, k: int | None = None) -> list[float]:
        return [r.wall_ms for r in self.results.get(profile, [])[:k]]

    def summary(self, profile: str, k: int | None = None) -> Summary:
        return summarize(self.walls(profile, k), seed=SEED)

    def common_n(self) -> int:
        """Requests every benched profile has run: comparisons use this shared prefix."""
        counts = [len(v) for v in self.results.values() if v]
        return min(counts) if counts else 0

    def benched(self) -> list[str]:
        return [p for p in self.profiles if self.results.get(p)]

    def samples(self) -> list[Sample]:
        return [r.as_sample() for p in self.benched() for r in self.results[p]]

    def as_json(self) -> dict[str, Any]:
        cells: dict[str, Any] = {}
        for name in self.benched():
            own = self.summary(name)
            rows = self.results[name]
            reasoning = [float(r.reasoning_tokens) for r in rows if r.reasoning_tokens is not None]
            vram = [r.vram_bytes for r in rows if r.vram_bytes is not None]
            cells[name] = {
                "n": own.n, "wall_ms": {"median": own.median, "ci95": [own.ci_lo, own.ci_hi]},
                "high_variance": own.high_variance, "stopped_early": self.stopped_early.get(name, False),
                "prefill_ms_median": _median([r.prefill_ms for r in rows]),
                "prefill_ms_no_reuse_median": _median([r.prefill_no_reuse_ms for r in rows]),
                "cache_n_median": _median([float(r.cache_n) for r in rows]),
                "decode_tok_s_median": _median([x for r in rows if (x := r.decode_tok_s) is not None]),
                "acceptance_median": _median([x for r in rows if (x := r.acceptance) is not None]),
                "reasoning_tokens_median": _median(reasoning),
                "concurrency_median": _median([float(r.concurrency) for r in rows]),
                "vram_peak_bytes": max(vram) if vram else "n/a",
                "engine": self.engines.get(name, "llama-server"),
                "spec_counters": asdict(self.counters[name]) if name in self.counters else None,
                "requests": [asdict(r) for r in rows],
            }
        return {"run_id": self.run_id, "workload": self.workload, "traffic": self.traffic,
                "profiles": self.benched(), "elapsed_s": self.elapsed_s, "concurrency": self.concurrency,
                "cache_reuse": self.cache_reuse, "rounds": self.rounds, "switches": self.switches, "notes": self.notes,
                "stop_reason": self.stop_reason, "left": self.left, "failed": self.failed, "cells": cells}


def _reasoning_tokens(payload: Any) -> int | None:
    usage = payload.get("usage") or {}
    details = usage.get("completion_tokens_details") if isinstance(usage, dict) else None
    if isinstance(details, dict) and isinstance(details.get("reasoning_tokens"), int):
        return int(details["reasoning_tokens"])
    choices = payload.get("choices")
    message = choices[0].get("message") if isinstance(choices, list) and choices and isinstance(
        choices[0], dict) else None
    thought = message.get("reasoning_content") if isinstance(message, dict) else None
    return max(1, len(thought) // CHARS_PER_TOKEN) if isinstance(thought, str) and thought else None


def measure(profile: str, index: int, request: WorkloadRequest, reply: Reply, vram: int | None,
            in_flight: int = 1, position: int = 0, round_number: int = 0) -> Result:
    """Turn one answer into a Result; every llama-server field is treated as optional."""
    timings = reply.payload.get("timings") or {}
    usage = reply.payload.get("usage") or {}
    cache_n = int(timings.get("cache_n") or 0)
    prompt_n = int(timings.get("prompt_n") or max(int(usage.get("prompt_tokens") or 0) - cache_n, 0)
                   or request.prompt_tokens)
    output_n = int(timings.get("predicted_n") or usage.get("completion_tokens") or 0)
    prefill = float(timings.get("prompt_ms") or 0.0)
    decode = float(timings.get("predicted_ms") or max(reply.wall_ms - prefill, 0.0))
    draft_n = timings.get("draft_n")
    accepted = timings.get("draft_n_accepted")
    return Result(profile=profile, request_index=index, task_class=request.task_class, prompt_tokens=prompt_n,
                  output_tokens=output_n, prefill_ms=prefill, decode_ms=decode, wall_ms=reply.wall_ms,
                  draft_n=int(draft_n) if draft_n is not None else None,
                  draft_accepted=int(accepted) if accepted is not None else None, vram_bytes=vram,
                  concurrency=in_flight, cache_n=cache_n, reasoning_tokens=_reasoning_tokens(reply.payload),
                  has_timings=isinstance(reply.payload.get("timings"), dict), position=position, round=round_number,
                  box_load=reply.box_load, live_load=reply.live_load)
