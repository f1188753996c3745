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
every profile replays the same requests in the same order at the same concurrency, each result
keeping its position in the plan and its round so the tuner can pair them (specd.tune.paired).
After each round a rule (specd.tune.sequential) says who leaves the rotation and whether to stop:
`specd bench`'s drops a profile whose median's 95% CI is apart from every rival's; the tuner's
compares each candidate with the incumbent at a schedule of looks and keeps sampling the undecided
ones, up to a cap. A request repeated in a later cycle of the workload gets a fresh seed (the same
on every profile), so sampled requests are drawn again rather than replayed.

Noise is recorded, not suffered: each sample carries the box's CPU pressure while it ran
(specd.tune.noise) and, on a shadow bench, the live server's load. A step that fails (a switch, a
warm-up, a request) is retried once after waiting for a quieter box; a profile that still fails
leaves the bench with a note naming the step and the error.
"""

from __future__ import annotations

import json
import math
import time
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from specd.engines.metrics import SpecCounters
from specd.errors import BadInput, Interrupted, SpecdError, UsageError
from specd.profiles.config import CAP_FACTOR
from specd.tune.noise import BoxLoad
from specd.tune.replay import Done, Item, plan_rounds, replay_round
from specd.tune.results import SEED, Report, Result, measure
from specd.tune.sequential import Rule, SeparationRule
from specd.tune.targets import DeploymentTarget, ModelTarget, Reply, Settles, Target
from specd.tune.workloads import Workload, WorkloadRequest

__all__ = ["DeploymentTarget", "ModelTarget", "Reply", "Report", "Result", "Settings", "Target", "bench_profiles",
           "bench_traffic", "measure", "request_body", "restoring", "run_bench"]

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
    max_n: int | None = None  # the tuner's sample cap per profile (sequential sampling); default CAP_FACTOR x n
    retries: int = 1  # a failed switch or round is tried again this often, after waiting for a quieter box
    quiet_wait_s: float = 60.0  # the longest wait for a quieter box before a retry

    def __post_init__(self) -> None:
        if self.n < 1:
            raise UsageError(f"--n must be at least 1, not {self.n}")
        if self.max_n is not None and self.max_n < self.n:
            raise UsageError(f"--max-n must be at least --n ({self.n}), not {self.max_n}")
        if self.concurrency is not None and self.concurrency < 1:
            raise UsageError(f"--concurrency must be at least 1, not {self.concurrency}")
        if self.temperature is not None and not 0.0 <= self.temperature <= 10.0:
            raise UsageError(f"--temperature must be between 0 and 10, not {self.temperature}")

        if self.per_round is not None and self.per_round < 1:
            raise UsageError(f"--per-round must be at least 1, not {self.per_round}")

    def reuses_cache(self, workload: Workload) -> bool:
        return self.cache_reuse if self.cache_reuse is not None else workload.follow_ups > 0

    @property
    def floor(self) -> int:
        return min(self.n, self.min_n if self.min_n is not None else max(3, self.n // 2))

    @property
    def cap(self) -> int:
        """The most requests per profile a sequential bench may spend (n when early stopping is off)."""
        return self.n if not self.early_stop else (self.max_n or CAP_FACTOR * self.n)

    def round_size(self, concurrency: int, cheap_switches: bool = False) -> int:
        """Few switches, yet at least two rounds when n allows; a concurrent round holds `concurrency` at least.
        Where a switch costs nothing (an in-process model, resident servers) a round is one request per
        profile: the pairs are then next to each other in time."""
        if self.per_round is not None:
            return self.per_round
        if cheap_switches:
            return concurrency
        return max(concurrency, 2, math.ceil(self.n / 4))


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


def request_body(request: WorkloadRequest, settings: Settings, cache_reuse: bool = False,
                 cycle: int = 0) -> dict[str, Any]:
    """The body as production sent it (sampling included), non-streamed, with its fixed seed: the
    `cycle`-th replay of a request within a bench draws with another seed (a client's own seed stays)."""
    body = dict(request.body)
    if settings.max_tokens is not None:
        body["max_tokens"] = min(int(body["max_tokens"]), settings.max_tokens)
    if settings.temperature is not None:
        body["temperature"] = settings.temperature
    body.update(seed=request_seed(request, settings.seed + cycle), stream=False, cache_prompt=cache_reuse)
    body.pop("stream_options", None)  # only valid with stream=true
    return body


def warmup_body(request: WorkloadRequest, settings: Settings) -> dict[str, Any]:
    """A workload request, short, behind a different first message so it cannot prime the prompt cache."""
    body = request_body(request, settings)
    return {**body, "messages": [WARMUP_NOTE, *body["messages"]], "max_tokens": 16, "cache_prompt": False}


Progress = Callable[[str, int, int], None]  # profile, requests done, planned (0 done: it is starting)


class _Metered:
    """The target, each reply marked with the box's CPU pressure while it ran."""

    def __init__(self, inner: Target, meter: BoxLoad, clock: Callable[[], float]) -> None:
        self.inner, self.meter, self.clock = inner, meter, clock
        self.concurrent = inner.concurrent
        self.slowest_s = 0.0  # the longest request so far, on the bench's clock

    def active(self) -> str | None:
        return self.inner.active()

    def activate(self, profile: str) -> None:
        self.inner.activate(profile)

    def complete(self, body: Mapping[str, Any], in_flight: int = 1) -> Reply:
        start, started = self.meter.read(), self.clock()
        reply = self.inner.complete(body, in_flight)
        self.slowest_s = max(self.slowest_s, self.clock() - started)
        return replace(reply, box_load=self.meter.span(start, self.meter.read()))

    def vram_bytes(self) -> int | None:
        return self.inner.vram_bytes()

    def spec_counters(self) -> SpecCounters | None:
        """The active server's speculative counters, for targets that can read them (a real server)."""
        reader = getattr(self.inner, "spec_counters", None)
        return reader() if callable(reader) else None

    def count(self, report: Report, profile: str, before: SpecCounters | None) -> None:
        """Add what the server counted over one round of `profile`'s measured requests, and name its engine."""
        engine = getattr(self.inner, "engine", None)
        if isinstance(engine, str):
            report.engines[profile] = engine
        after = self.spec_counters()
        if before is not None and after is not None:
            report.counters[profile] = report.counters.get(profile, SpecCounters(0, 0)) + (after - before)


class _StepFailed(SpecdError):
    """A bench step failed after its retries: `step` names it."""

    def __init__(self, step: str, cause: SpecdError) -> None:
        super().__init__(f"{step} failed: {str(cause).splitlines()[0]}")
        self.step = step


class _Loop:
    """One bench: rounds of blocks (a profile replaying the round's requests), rule-driven (see the module doc)."""

    def __init__(self, target: Target, profiles: Sequence[str], workload: Workload, settings: Settings,
                 progress: Progress | None, rule: Rule, meter: BoxLoad, clock: Callable[[], float]) -> None:
        self.target, self.workload, self.settings, self.progress, self.rule = target, workload, settings, progress, rule
        self.meter, self.clock = meter, clock
        self.metered = _Metered(target, meter, clock)
        traffic = bench_traffic(workload, settings)
        self.concurrency, cache_reuse = int(traffic["concurrency"]), bool(traffic["cache_reuse"])
        self.arrivals = settings.concurrency is None and workload.has_arrivals
        self.cheap = bool(getattr(target, "cheap_switches", False))
        self.report = Report(workload=workload.name, profiles=list(profiles), concurrency=self.concurrency,
                             cache_reuse=cache_reuse, traffic=traffic, box_load_seen=meter.available)
        self.current: str | None = None
        self.warmed: set[str] = set()
        self.slowest_switch_s = 0.0  # kept in reserve twice: the caller's way back (or on to a winner) must fit
        self.slowest_block_s = 0.0  # a whole block: its switch and warm-up too (none starts that cannot end in time)

    @property
    def deadline(self) -> float | None:
        """The deadline for starting requests: the budget's end less the time to switch back and on."""
        if self.settings.deadline is None:
            return None
        return self.settings.deadline - 2.0 * self.slowest_switch_s

    def spent(self, ahead_s: float = 0.0) -> bool:
        return self.deadline is not None and self.clock() + ahead_s > self.deadline

    def left_s(self) -> float | None:
        return None if self.deadline is None else self.deadline - self.clock()

    def body_of(self, item: Item) -> dict[str, Any]:
        return request_body(item.request, self.settings, self.report.cache_reuse, item.cycle)

    def _switch_to(self, profile: str) -> None:
        if profile == self.current:
            return
        self.current = None
        if self.progress is not None:
            self.progress(profile, len(self.report.results.get(profile, [])), self.rule.cap)
        started = self.clock()
        self.target.activate(profile)
        self.slowest_switch_s = max(self.slowest_switch_s, self.clock() - started)
        self.current = profile
        self.report.switches += 1
        if self.cheap and profile in self.warmed:
            return
        for index in range(self.settings.warmup):
            request = self.workload.requests[index % len(self.workload.requests)]
            self.target.complete(warmup_body(request, self.settings))
        self.warmed.add(profile)

    def block(self, profile: str, items: Sequence[Item], number: int) -> list[Done]:
        """One profile's run of a round, each step tried again (after a quieter moment) when it fails."""
        attempt = 0
        while True:
            step = f"switch to {profile}" if profile != self.current else f"round {number + 1}"
            started = self.clock()
            try:
                self._switch_to(profile)
                step = f"round {number + 1} ({len(items)} requests)"
                before = self.metered.spec_counters()
                last_start = None if self.deadline is None else self.deadline - self.metered.slowest_s
                done = replay_round(self.metered, items, self.body_of, self.settings.concurrency,
                                    arrivals=self.arrivals, deadline=last_start, clock=self.clock)
                self.metered.count(self.report, profile, before)
                self.slowest_block_s = max(self.slowest_block_s, self.clock() - started)
                return done
            except Interrupted:
                raise
            except SpecdError as exc:
                attempt += 1
                if isinstance(exc, BadInput) or attempt > self.settings.retries or self.spent(self.slowest_block_s):
                    raise _StepFailed(step, exc) from exc
                left = self.left_s()  # a retry waits only as long as a whole block can still follow it
                waited = self.meter.wait_quiet(min(self.settings.quiet_wait_s,
                                                   1e9 if left is None else left - self.slowest_block_s))
                if self.spent(self.slowest_block_s):
                    raise _StepFailed(step, exc) from exc
                self.current = None  # switch in again: a server stopped from outside comes back healthy first
                self.report.notes.append(f"{profile}: {step} failed ({str(exc).splitlines()[0]}); tried again "
                                         f"after {waited:.0f} s waiting for a quieter box")

    def round(self, number: int, items: Sequence[Item], first_position: int, rotation: list[str]) -> bool:
        """Every profile in the rotation replays the round (ABBA order); True when the budget cut it short."""
        report, cut = self.report, False
        for profile in rotation if number % 2 == 0 else list(reversed(rotation)):
            if self.spent(self.slowest_block_s):  # a block that cannot finish in time is not started
                return True
            try:
                done = self.block(profile, items, number)
            except _StepFailed as exc:
                report.results.pop(profile, None)
                report.failed[profile] = str(exc)
                report.notes.append(f"{profile}: not benched: {exc}")
                rotation.remove(profile)
                continue
            cut = cut or len(done) < len(items)
            rows = report.results.setdefault(profile, [])
            vram = self.target.vram_bytes()
            rows.extend(measure(profile, d.item.index, d.item.request, d.reply, vram, d.in_flight,
                                first_position + items.index(d.item), number) for d in done)
            if self.progress is not None:
                self.progress(profile, len(rows), self.rule.cap)
        return cut

    def run(self) -> Report:
        report, settings = self.report, self.settings
        started = self.clock()
        rounds = plan_rounds(self.workload, self.rule.cap, settings.round_size(self.concurrency, self.cheap))
        rotation = list(report.profiles)
        first = 0
        for number, items in enumerate(rounds):
            if not rotation:
                break
            if self.spent():
                report.stop_reason = f"the time budget was spent before round {number + 1}"
                break
            cut = self.round(number, items, first, rotation)
            first += len(items)
            report.rounds = number + 1
            if cut or (self.spent() and number + 1 < len(rounds)):
                report.stop_reason = f"the time budget was spent in round {number + 1} of {len(rounds)}"
                report.notes.append(report.stop_reason)
                break
            leaving, stop = self.rule.after_round(report, rotation, number + 1 == len(rounds))
            for profile in leaving:
                report.stopped_early[profile] = True
                rotation.remove(profile)
            if stop is not None:
                report.stop_reason = stop
                break
        if not report.stop_reason:
            report.stop_reason = f"the planned {self.rule.cap} requests per profile were run"
        for profile in report.profiles:
            if profile not in report.results and profile not in report.failed:
                report.notes.append(f"{profile}: not benched, the time budget was spent")
        report.elapsed_s = self.clock() - started
        return report


def bench_profiles(target: Target, profiles: Sequence[str], workload: Workload, settings: Settings,
                   progress: Progress | None = None, rule: Rule | None = None,
                   meter: BoxLoad | None = None, clock: Callable[[], float] = time.monotonic) -> Report:
    """Bench without restoring, profiles interleaved round by round; the caller decides where the box ends up.
    `rule` (default: specd bench's SeparationRule) says who leaves and when to stop. Nothing starts that the
    slowest of its kind so far (a request; a block: switch, warm-up and replay) says cannot end by the
    settings' deadline (on `clock`) less two switches, the caller's way back or on to a winner."""
    if not profiles:
        raise UsageError("nothing to bench: no profiles given")
    if len(set(profiles)) != len(profiles):
        raise UsageError(f"a profile is listed twice: {', '.join(profiles)}")
    chosen = rule or SeparationRule(settings.n, settings.floor, settings.early_stop)
    return _Loop(target, profiles, workload, settings, progress, chosen, meter or BoxLoad(clock=clock), clock).run()


@contextmanager
def restoring(target: Target, keep: Callable[[], str | None] = lambda: None) -> Iterator[str | None]:
    """Yield the active profile; on the way out (also on Ctrl-C or failure) put back keep() or it
    (a target that `Settles` ends its own way: specd.tune.targets)."""
    original = target.active()
    try:
        yield original
    finally:
        wanted = keep() or original
        if wanted is not None:
            if isinstance(target, Settles):
                target.settle(wanted)
            elif target.active() != wanted:
                target.activate(wanted)


def run_bench(target: Target, profiles: Sequence[str], workload: Workload, settings: Settings,
              progress: Progress | None = None) -> Report:
    """Bench every profile and restore the original one (also on Ctrl-C or failure)."""
    with restoring(target):
        return bench_profiles(target, profiles, workload, settings, progress)
