"""Benchmark profiles on a workload: switch (health-gated), warm up, replay, measure, restore.

A bench drives a `Target` (specd.tune.targets): the real one switches the deployment's unit and posts
to the active llama-server; `ModelTarget` answers from the emulator's performance model in-process.
Every request is sent with the traffic's own sampling settings (temperature, top_p, ...: what the
client sent, server defaults where it sent none), as production runs them, and a fixed seed per
request, so every profile draws from the same distribution; `--temperature 0` forces greedy
decoding instead. The prompt cache is on when the traffic continues conversations (production
reuses their prefixes; each result carries `cache_n`) and off otherwise, so a request repeated
across rounds pays its own prefill.

Sampling (seed 002: single runs misled by 1.5x-4x): profiles are interleaved round by round
(A B | B A | A B, see specd.tune.replay), so a machine-load drift between blocks cannot flip the pick;
every profile replays the same requests in the same order at the same concurrency. After each
round, a profile whose median wall clock (over the requests all profiles share) has a 95% CI
separated from every rival's, with at least `min_n` requests, leaves the rotation.
"""

from __future__ import annotations

import json
import math
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

from specd.engines.metrics import SpecCounters
from specd.errors import Interrupted, SpecdError, UsageError
from specd.traffic.taskclass import TaskClass
from specd.tune.perfmodel import Sample
from specd.tune.replay import Done, plan_rounds, replay_round
from specd.tune.stats import Summary, cis_separated, summarize
from specd.tune.targets import DeploymentTarget, ModelTarget, Reply, Target
from specd.tune.workloads import Workload, WorkloadRequest

__all__ = ["DeploymentTarget", "ModelTarget", "Reply", "Report", "Result", "Settings", "Target", "bench_profiles",
           "bench_traffic", "measure", "request_body", "restoring", "run_bench"]

SEED = 42
CHARS_PER_TOKEN = 4
WARMUP_NOTE = {"role": "system", "content": "Warm-up request; ignore."}


@dataclass(frozen=True)
class Settings:
    n: int = 10
    min_n: int | None = None  # default: half of n, at least 3
    warmup: int = 1
    max_tokens: int | None = None  # caps every request's max_tokens (short smoke benches)
    seed: int = SEED
    early_stop: bool = True
    deadline: float | None = None  # time.monotonic() after which no new request starts
    concurrency: int | None = None  # every request at this level; default: each request's own (the traffic's)
    per_round: int | None = None  # requests per profile per round; default: see round_size
    cache_reuse: bool | None = None  # cache_prompt on; default: when the traffic continues conversations
    temperature: float | None = None  # forced on every request; default: each request's own sampling

    def __post_init__(self) -> None:
        if self.n < 1:
            raise UsageError(f"--n must be at least 1, not {self.n}")
        if self.concurrency is not None and self.concurrency < 1:
            raise UsageError(f"--concurrency must be at least 1, not {self.concurrency}")
        if self.temperature is not None and not 0.0 <= self.temperature <= 10.0:
            raise UsageError(f"--temperature must be between 0 and 10, not {self.temperature}")

    def reuses_cache(self, workload: Workload) -> bool:
        return self.cache_reuse if self.cache_reuse is not None else workload.follow_ups > 0
        if self.per_round is not None and self.per_round < 1:
            raise UsageError(f"--per-round must be at least 1, not {self.per_round}")

    @property
    def floor(self) -> int:
        return min(self.n, self.min_n if self.min_n is not None else max(3, self.n // 2))

    def round_size(self, concurrency: int) -> int:
        """Few switches, yet at least two rounds when n allows; a concurrent round holds `concurrency` at least."""
        if self.per_round is not None:
            return self.per_round
        return max(concurrency, 2, math.ceil(self.n / 4))


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
                "cells": cells}


def bench_traffic(workload: Workload, settings: Settings) -> dict[str, Any]:
    """The workload's facts as this bench replays them: with its concurrency, cache and sampling overrides."""
    facts = workload.facts().as_json()
    if settings.concurrency is not None:
        facts.update(concurrency=settings.concurrency, concurrency_levels={str(settings.concurrency): facts["size"]},
                     arrival="closed-loop")
    if settings.temperature is not None:
        facts["sampling"] = {f"temperature={settings.temperature:g} (forced)": facts["size"]}
    facts["cache_reuse"] = settings.reuses_cache(workload)
    return facts


def request_seed(request: WorkloadRequest, base: int = SEED) -> int:
    """The seed a request is sent with: its own when the client sent one, else one fixed by its body,
    so every profile (and every bench) draws the same request the same way."""
    own = request.body.get("seed")
    if isinstance(own, int) and not isinstance(own, bool) and own >= 0:
        return own
    digest = zlib.crc32(json.dumps(request.body, sort_keys=True, default=str).encode())
    return (base * 1_000_003 + digest) % 2**31


def request_body(request: WorkloadRequest, settings: Settings, cache_reuse: bool = False) -> dict[str, Any]:
    """The body as production sent it (sampling included), non-streamed, with its fixed seed."""
    body = dict(request.body)
    if settings.max_tokens is not None:
        body["max_tokens"] = min(int(body["max_tokens"]), settings.max_tokens)
    if settings.temperature is not None:
        body["temperature"] = settings.temperature
    body.update(seed=request_seed(request, settings.seed), stream=False, cache_prompt=cache_reuse)
    body.pop("stream_options", None)  # only valid with stream=true
    return body


def warmup_body(request: WorkloadRequest, settings: Settings) -> dict[str, Any]:
    """A workload request, short, behind a different first message so it cannot prime the prompt cache."""
    body = request_body(request, settings)
    return {**body, "messages": [WARMUP_NOTE, *body["messages"]], "max_tokens": 16, "cache_prompt": False}


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
            in_flight: int = 1) -> Result:
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
                  has_timings=isinstance(reply.payload.get("timings"), dict))


Progress = Callable[[str, int, int], None]  # profile, requests done, planned


def _spec_counters(target: Target) -> SpecCounters | None:
    """The active server's speculative counters, for targets that can read them (a real server)."""
    reader = getattr(target, "spec_counters", None)
    return reader() if callable(reader) else None


def _count(report: Report, profile: str, target: Target, before: SpecCounters | None) -> None:
    """Add what the server counted over one round of `profile`'s measured requests, and name its engine."""
    engine = getattr(target, "engine", None)
    if isinstance(engine, str):
        report.engines[profile] = engine
    after = _spec_counters(target)
    if before is not None and after is not None:
        report.counters[profile] = report.counters.get(profile, SpecCounters(0, 0)) + (after - before)


def _leavers(report: Report, rotation: Sequence[str], floor: int) -> list[str]:
    """Profiles in the rotation whose CI, over the requests shared with each rival, is apart from every rival's."""
    leaving = []
    for profile in rotation:
        rivals = [p for p in report.benched() if p != profile]
        if not rivals:
            continue
        apart = True
        for rival in rivals:
            k = min(len(report.results[profile]), len(report.results[rival]))
            if k < floor or not cis_separated(report.summary(profile, k), report.summary(rival, k)):
                apart = False
                break
        if apart:
            leaving.append(profile)
    return leaving


def _results(profile: str, done: Sequence[Done], target: Target) -> list[Result]:
    vram = target.vram_bytes()
    return [measure(profile, d.item.index, d.item.request, d.reply, vram, d.in_flight) for d in done]


def bench_profiles(target: Target, profiles: Sequence[str], workload: Workload, settings: Settings,  # noqa: C901 - predates the complexity gate
                   progress: Progress | None = None) -> Report:
    """Bench without restoring, profiles interleaved round by round; the caller decides where the box ends up."""
    if not profiles:
        raise UsageError("nothing to bench: no profiles given")
    if len(set(profiles)) != len(profiles):
        raise UsageError(f"a profile is listed twice: {', '.join(profiles)}")
    started = time.monotonic()
    traffic = bench_traffic(workload, settings)
    concurrency, cache_reuse = int(traffic["concurrency"]), bool(traffic["cache_reuse"])
    arrivals = settings.concurrency is None and workload.has_arrivals
    report = Report(workload=workload.name, profiles=list(profiles), concurrency=concurrency,
                    cache_reuse=cache_reuse, traffic=traffic)
    rounds = plan_rounds(workload, settings.n, settings.round_size(concurrency))
    rotation = list(profiles)
    current: str | None = None

    def body_of(request: WorkloadRequest) -> dict[str, Any]:
        return request_body(request, settings, cache_reuse)

    def spent() -> bool:
        return settings.deadline is not None and time.monotonic() > settings.deadline

    cut = False  # a round the deadline ended before all its requests ran

    for number, items in enumerate(rounds):
        if not rotation or spent():
            break
        for profile in rotation if number % 2 == 0 else list(reversed(rotation)):
            if spent():
                break
            try:
                if profile != current:
                    current = None
                    target.activate(profile)
                    current = profile
                    report.switches += 1
                    for index in range(settings.warmup):
                        target.complete(warmup_body(workload.requests[index % len(workload.requests)], settings))
                before = _spec_counters(target)
                done = replay_round(target, items, body_of, settings.concurrency, arrivals=arrivals,
                                    deadline=settings.deadline)
                _count(report, profile, target, before)
                cut = cut or len(done) < len(items)
            except Interrupted:
                raise
            except SpecdError as exc:
                report.results.pop(profile, None)
                report.notes.append(f"{profile}: not benched: {str(exc).splitlines()[0]}")
                rotation.remove(profile)
                continue
            rows = report.results.setdefault(profile, [])
            rows.extend(_results(profile, done, target))
            if progress is not None:
                progress(profile, len(rows), settings.n)
        report.rounds = number + 1
        if spent() and (cut or number + 1 < len(rounds)):
            report.notes.append(f"time budget spent in round {number + 1} of {len(rounds)}")
            break
        if settings.early_stop and number + 1 < len(rounds):
            for profile in _leavers(report, rotation, settings.floor):
                report.stopped_early[profile] = True
                rotation.remove(profile)
    for profile in profiles:
        if profile not in report.results and not any(n.startswith(f"{profile}:") for n in report.notes):
            report.notes.append(f"{profile}: not benched, the time budget was spent")
    report.elapsed_s = time.monotonic() - started
    return report


@contextmanager
def restoring(target: Target, keep: Callable[[], str | None] = lambda: None) -> Iterator[str | None]:
    """Yield the active profile; on the way out (also on Ctrl-C or failure) put back keep() or it."""
    original = target.active()
    try:
        yield original
    finally:
        wanted = keep() or original
        if wanted is not None and target.active() != wanted:
            target.activate(wanted)


def run_bench(target: Target, profiles: Sequence[str], workload: Workload, settings: Settings,
              progress: Progress | None = None) -> Report:
    """Bench every profile and restore the original one (also on Ctrl-C or failure)."""
    with restoring(target):
        return bench_profiles(target, profiles, workload, settings, progress)
