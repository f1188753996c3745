"""Benchmark profiles on a workload: switch (health-gated), warm up, replay, measure, restore.

A bench drives a `Target`: the real one switches the deployment's unit with `Switcher` and posts
to the active llama-server; `ModelTarget` answers from the emulator's performance model in-process
(no server, no clock) for experiments and the accuracy benchmark. Every request is sent at
temperature 0 with a fixed seed and `cache_prompt: false`, so each sample pays its own prefill.

Sampling (seed 002: single runs misled by 1.5x-4x): profile after profile, request k replays
workload request k mod len(workload), so profiles see the same requests in the same order. The
first profile runs all `n`; each later one stops early, after at least `min_n`, once the median
wall clock of its first k requests has a 95% CI separated from every earlier profile's first k.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import httpx

from specd import gpu, store
from specd.config import Deployment
from specd.emulator_model import EmulatorModel, asks_to_repeat, plan_request
from specd.errors import HealthError, SpecdError, UsageError
from specd.perfmodel import Sample
from specd.profiles import load_profile
from specd.stats import Summary, should_stop_early, summarize
from specd.switch import Switcher
from specd.taskclass import TaskClass, classify, last_user_text
from specd.workloads import Workload, WorkloadRequest

SEED = 42
REQUEST_TIMEOUT_S = 600.0
SCHEMA = """
CREATE TABLE IF NOT EXISTS bench_runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    unit TEXT NOT NULL,
    at REAL NOT NULL,
    workload TEXT NOT NULL,
    profiles TEXT NOT NULL,
    settings TEXT NOT NULL,
    summary TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS bench_samples (
    run_id INTEGER NOT NULL REFERENCES bench_runs(id) ON DELETE CASCADE,
    profile TEXT NOT NULL,
    request_index INTEGER NOT NULL,
    task_class TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    prefill_ms REAL NOT NULL,
    decode_ms REAL NOT NULL,
    wall_ms REAL NOT NULL,
    draft_n INTEGER,
    draft_accepted INTEGER,
    vram_bytes INTEGER
);
CREATE INDEX IF NOT EXISTS bench_samples_run ON bench_samples(run_id, profile);
"""


@dataclass(frozen=True)
class Settings:
    n: int = 10
    min_n: int | None = None  # default: half of n, at least 3
    warmup: int = 1
    max_tokens: int | None = None  # caps every request's max_tokens (short smoke benches)
    seed: int = SEED
    early_stop: bool = True
    deadline: float | None = None  # time.monotonic() after which no new request starts

    def __post_init__(self) -> None:
        if self.n < 1:
            raise UsageError(f"--n must be at least 1, not {self.n}")

    @property
    def floor(self) -> int:
        return min(self.n, self.min_n if self.min_n is not None else max(3, self.n // 2))


@dataclass(frozen=True)
class Result:
    """One measured request. prefill_ms doubles as TTFT (non-streamed, no cache reuse)."""

    profile: str
    request_index: int
    task_class: TaskClass
    prompt_tokens: int
    output_tokens: int
    prefill_ms: float
    decode_ms: float
    wall_ms: float
    draft_n: int | None = None
    draft_accepted: int | None = None
    vram_bytes: int | None = None

    @property
    def decode_tok_s(self) -> float | None:
        return 1000.0 * self.output_tokens / self.decode_ms if self.decode_ms > 0 else None

    @property
    def acceptance(self) -> float | None:
        return self.draft_accepted / self.draft_n if self.draft_n and self.draft_accepted is not None else None

    def as_sample(self) -> Sample:
        return Sample(profile=self.profile, task_class=self.task_class,
                      prompt_tokens=self.prompt_tokens, output_tokens=self.output_tokens,
                      prefill_ms=self.prefill_ms, decode_ms=self.decode_ms, wall_ms=self.wall_ms,
                      draft_n=self.draft_n, draft_accepted=self.draft_accepted)


@dataclass
class Report:
    workload: str
    profiles: list[str]
    results: dict[str, list[Result]] = field(default_factory=dict)
    stopped_early: dict[str, bool] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0
    run_id: int | None = None

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
            rates = [r.decode_tok_s for r in rows if r.decode_tok_s is not None]
            accepts = [r.acceptance for r in rows if r.acceptance is not None]
            vram = [r.vram_bytes for r in rows if r.vram_bytes is not None]
            cells[name] = {
                "n": own.n, "wall_ms": {"median": own.median, "ci95": [own.ci_lo, own.ci_hi]},
                "high_variance": own.high_variance, "stopped_early": self.stopped_early.get(name, False),
                "prefill_ms_median": summarize([r.prefill_ms for r in rows]).median,
                "decode_tok_s_median": summarize(rates).median if rates else None,
                "acceptance_median": summarize(accepts).median if accepts else None,
                "vram_peak_bytes": max(vram) if vram else "n/a",
                "requests": [asdict(r) for r in rows],
            }
        return {"run_id": self.run_id, "workload": self.workload, "profiles": self.benched(),
                "elapsed_s": self.elapsed_s, "notes": self.notes, "cells": cells}


@dataclass(frozen=True)
class Reply:
    payload: Mapping[str, Any]
    wall_ms: float


class Target(Protocol):
    """What a bench drives: one profile active at a time, and requests to it."""

    def active(self) -> str | None: ...
    def activate(self, profile: str) -> None: ...
    def complete(self, body: Mapping[str, Any]) -> Reply: ...
    def vram_bytes(self) -> int | None: ...


class DeploymentTarget:
    """The real thing: health-gated switches of the unit, HTTP to its llama-server.

    Each activation uses a fresh Switcher (and D-Bus connection): a bench outlives connections.
    """

    def __init__(self, deployment: Deployment, *, trigger: str = "bench") -> None:
        self.deployment = deployment
        self.trigger = trigger
        self.http = httpx.Client(timeout=httpx.Timeout(REQUEST_TIMEOUT_S, connect=5.0))
        self._url = ""
        self._alias = ""
        self._main_pid = 0

    def active(self) -> str | None:
        return Switcher(self.deployment, trigger=self.trigger).active_profile()

    def activate(self, profile: str) -> None:
        switcher = Switcher(self.deployment, trigger=self.trigger)
        switcher.switch(profile)
        loaded = load_profile(self.deployment.profiles_dir, profile)
        self._url, self._alias = loaded.base_url, loaded.alias
        self._main_pid = switcher.systemd.unit_state(self.deployment.unit).main_pid

    def complete(self, body: Mapping[str, Any]) -> Reply:
        started = time.perf_counter()
        try:
            answer = self.http.post(f"{self._url}/v1/chat/completions", json={**body, "model": self._alias})
        except httpx.HTTPError as exc:
            raise HealthError(f"bench request to {self._url} failed: {type(exc).__name__}: {exc}") from exc
        wall_ms = 1000.0 * (time.perf_counter() - started)
        if answer.status_code != 200:
            raise HealthError(f"bench request to {self._url} answered {answer.status_code}: {answer.text[:200]}")
        return Reply(answer.json(), wall_ms)

    def vram_bytes(self) -> int | None:
        used = gpu.process_vram(self._main_pid) if self._main_pid else None
        return used.used_bytes if isinstance(used, gpu.ProcessVram) else None

    def close(self) -> None:
        self.http.close()


class ModelTarget:
    """The emulator's performance model in-process: modelled timings, no server, no waiting.

    `modes` maps profile name to an emulator mode key (none, mtp, dflash, draft, ngram).
    """

    def __init__(self, model: EmulatorModel, modes: Mapping[str, str], *, seed: int = 0,
                 active: str | None = None) -> None:
        self.model, self.modes, self._active = model, dict(modes), active
        self.rng = random.Random(seed)
        self.switches = 0

    def active(self) -> str | None:
        return self._active

    def activate(self, profile: str) -> None:
        if profile not in self.modes:
            raise UsageError(f"no emulated profile {profile!r}", hint=f"known: {', '.join(sorted(self.modes))}")
        self.switches += self._active != profile
        self._active = profile

    def noise(self) -> float:
        return math.exp(self.rng.gauss(0.0, self.model.noise_sigma)) if self.model.noise_sigma > 0 else 1.0

    def complete(self, body: Mapping[str, Any]) -> Reply:
        if self._active is None:
            raise UsageError("no emulated profile is active")
        messages = list(body["messages"])
        prompt_chars = sum(len(str(m.get("content", ""))) for m in messages)
        timing = plan_request(
            self.model.mode(self.modes[self._active]),
            prompt_tokens=max(1, int(prompt_chars / self.model.chars_per_token)), cache_n=0,
            output_tokens=int(body["max_tokens"]), task_class=classify(messages),
            repeats_input=asks_to_repeat(last_user_text(messages)),
            prefill_noise=self.noise(), decode_noise=self.noise())
        payload = {"usage": {"prompt_tokens": timing.prompt_n, "completion_tokens": timing.predicted_n},
                   "timings": {"prompt_n": timing.prompt_n, "prompt_ms": timing.prompt_ms,
                               "predicted_n": timing.predicted_n, "predicted_ms": timing.predicted_ms,
                               "draft_n": timing.draft_n, "draft_n_accepted": timing.draft_n_accepted}}
        return Reply(payload, timing.wall_ms)

    def vram_bytes(self) -> int | None:
        return None


def request_body(request: WorkloadRequest, settings: Settings) -> dict[str, Any]:
    body = dict(request.body)
    if settings.max_tokens is not None:
        body["max_tokens"] = min(int(body["max_tokens"]), settings.max_tokens)
    body.update(temperature=0, seed=settings.seed, stream=False, cache_prompt=False)
    return body


def measure(profile: str, index: int, request: WorkloadRequest, reply: Reply, vram: int | None) -> Result:
    """Turn one answer into a Result; every llama-server field is treated as optional."""
    timings = reply.payload.get("timings") or {}
    usage = reply.payload.get("usage") or {}
    prompt_n = int(timings.get("prompt_n") or usage.get("prompt_tokens") or request.prompt_tokens)
    output_n = int(timings.get("predicted_n") or usage.get("completion_tokens") or 0)
    prefill = float(timings.get("prompt_ms") or 0.0)
    decode = float(timings.get("predicted_ms") or max(reply.wall_ms - prefill, 0.0))
    draft_n = timings.get("draft_n")
    accepted = timings.get("draft_n_accepted")
    return Result(profile=profile, request_index=index, task_class=request.task_class, prompt_tokens=prompt_n,
                  output_tokens=output_n, prefill_ms=prefill, decode_ms=decode, wall_ms=reply.wall_ms,
                  draft_n=int(draft_n) if draft_n is not None else None,
                  draft_accepted=int(accepted) if accepted is not None else None, vram_bytes=vram)


Progress = Callable[[str, int, int], None]  # profile, requests done, planned


def _separated(report: Report, profile: str, floor: int) -> bool:
    k = len(report.results[profile])
    rivals = [p for p in report.benched() if p != profile and len(report.results[p]) >= k]
    if k < floor or not rivals:
        return False
    cells = {p: report.summary(p, k) for p in (*rivals, profile)}
    return should_stop_early(cells, floor, profile)


def bench_profile(target: Target, profile: str, workload: Workload, settings: Settings, report: Report,
                  progress: Progress | None = None) -> None:
    """Switch to `profile`, warm up, replay up to n requests into report.results[profile]."""
    target.activate(profile)
    requests = workload.requests
    for index in range(settings.warmup):
        target.complete({**request_body(requests[index % len(requests)], settings), "max_tokens": 8})
    rows = report.results.setdefault(profile, [])
    for k in range(settings.n):
        if settings.deadline is not None and time.monotonic() > settings.deadline:
            report.notes.append(f"{profile}: time budget spent after {k} of {settings.n} requests")
            break
        request = requests[k % len(requests)]
        reply = target.complete(request_body(request, settings))
        rows.append(measure(profile, k % len(requests), request, reply, target.vram_bytes()))
        if progress is not None:
            progress(profile, k + 1, settings.n)
        if settings.early_stop and k + 1 < settings.n and _separated(report, profile, settings.floor):
            report.stopped_early[profile] = True
            break


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


def bench_profiles(target: Target, profiles: Sequence[str], workload: Workload, settings: Settings,
                   progress: Progress | None = None) -> Report:
    """Bench without restoring: the caller decides where the box ends up."""
    if not profiles:
        raise UsageError("nothing to bench: no profiles given")
    if len(set(profiles)) != len(profiles):
        raise UsageError(f"a profile is listed twice: {', '.join(profiles)}")
    started = time.monotonic()
    report = Report(workload=workload.name, profiles=list(profiles))
    for profile in profiles:
        if settings.deadline is not None and time.monotonic() > settings.deadline:
            report.notes.append(f"{profile}: not benched, the time budget was spent")
            continue
        try:
            bench_profile(target, profile, workload, settings, report, progress)
        except SpecdError as exc:
            report.results.pop(profile, None)
            report.notes.append(f"{profile}: not benched: {str(exc).splitlines()[0]}")
    report.elapsed_s = time.monotonic() - started
    return report


def save_report(report: Report, unit: str, settings: Settings) -> int:
    """Store a run and its samples in the state DB; returns the run id."""
    conn = store.connect()
    try:
        store.ensure_schema(conn, SCHEMA)
        summary = {k: v for k, v in report.as_json().items() if k != "cells"}
        config = {k: v for k, v in asdict(settings).items() if k != "deadline"}
        cursor = conn.execute(
            "INSERT INTO bench_runs (unit, at, workload, profiles, settings, summary) VALUES (?,?,?,?,?,?)",
            (unit, time.time(), report.workload, json.dumps(report.benched()), json.dumps(config),
             json.dumps(summary)))
        run_id = int(cursor.lastrowid or 0)
        rows = [(run_id, r.profile, r.request_index, r.task_class, r.prompt_tokens, r.output_tokens, r.prefill_ms,
                 r.decode_ms, r.wall_ms, r.draft_n, r.draft_accepted, r.vram_bytes)
                for p in report.benched() for r in report.results[p]]
        conn.executemany("INSERT INTO bench_samples VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", rows)
    finally:
        conn.close()
    report.run_id = run_id
    return run_id
