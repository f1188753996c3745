"""The tuner: bench the candidate profiles on a workload, pick the best wall clock, maybe switch.

`decide` is pure: medians and CIs in, a `Decision` out. It switches only when the winner beats
the active profile by `margin` with 95% CIs that do not overlap (so two identical profiles never
trigger a switch), never when the deployment is pinned, and always judges wall clock, never
decode rate alone. `tune` runs a bench through a `Target` and leaves the box on the winner or on
the original profile; `nightly` is the daemon's job: enabled, not pinned, traffic idle, within
the time budget, and every decision recorded in history with its numbers.
"""

from __future__ import annotations

import json
import logging
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from specd import paths
from specd.deploy.history import History, Trigger
from specd.errors import SpecdError, UsageError
from specd.profiles.config import Config, Deployment
from specd.profiles.load import list_profiles
from specd.traffic import records as traffic
from specd.traffic.capture import CAPTURE_NAME
from specd.traffic.taskclass import TASK_CLASSES, TaskClass
from specd.tune.bench import (
    DeploymentTarget,
    Progress,
    Report,
    Settings,
    Target,
    bench_profiles,
    restoring,
    save_report,
)
from specd.tune.perfmodel import MixItem, crossover_output_tokens, expected_wall_ms, fit_all
from specd.tune.pins import get_pin
from specd.tune.stats import Summary, cis_separated
from specd.tune.verify import Guard, tuner_guard
from specd.tune.workloads import (
    Workload,
    concurrency_by_period,
    concurrency_level,
    load_workload,
    parse_line,
    period_note,
    synthesize,
)

log = logging.getLogger(__name__)
RECENT_DAYS = 7.0
DEFAULT_MAX_TOKENS = 256


@dataclass(frozen=True)
class Estimate:
    profile: str
    n: int
    median_ms: float
    ci_lo_ms: float
    ci_hi_ms: float
    high_variance: bool
    model_wall_ms: float | None = None  # the fitted model's expected wall clock over the workload mix


@dataclass(frozen=True)
class Decision:
    best: str | None
    active: str | None
    switch: bool
    reason: str
    margin: float
    estimates: tuple[Estimate, ...] = ()
    pinned: str | None = None
    dry_run: bool = False
    crossovers: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    bench_s: float = 0.0
    workload: str = ""

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["estimates"] = {e.profile: {k: v for k, v in asdict(e).items() if k != "profile"}
                             for e in self.estimates}
        return data


def _pct(better: float, worse: float) -> float:
    return 100.0 * (worse - better) / worse if worse > 0 else 0.0


def decide(summaries: Mapping[str, Summary], active: str | None, *, margin: float = 0.05,
           pinned: str | None = None, dry_run: bool = False) -> Decision:
    """Rank by median wall clock; switch only past the margin with separated CIs, never when pinned."""
    if not summaries:
        return Decision(None, active, False, f"kept {active or 'nothing'}: no profile could be benched", margin,
                        pinned=pinned, dry_run=dry_run)
    ranked = sorted(summaries.items(), key=lambda item: (item[1].median, item[0]))
    estimates = tuple(Estimate(name, s.n, s.median, s.ci_lo, s.ci_hi, s.high_variance) for name, s in ranked)
    best, top = ranked[0]
    would = "would switch" if dry_run else "switched"
    noisy = [name for name, s in ranked if s.high_variance]
    tail = f" (high variance: {', '.join(noisy)})" if noisy else ""

    def result(switch: bool, reason: str) -> Decision:
        return Decision(best, active, switch and not dry_run, reason + tail, margin, estimates, pinned, dry_run)

    if active is None or active not in summaries:
        why = "no profile was active" if active is None else f"the active {active} could not be benched"
        if pinned is not None:
            return result(False, f"kept {active or 'nothing'}: pinned to {pinned}; {best} is fastest")
        return result(True, f"{would} to {best}: fastest ({top.median:.0f} ms median); {why}")
    current = summaries[active]
    if best == active:
        if len(ranked) == 1:
            return result(False, f"kept {active}: the only profile benched")
        runner, second = ranked[1]
        return result(False, f"kept {active}: fastest; {runner} is {100.0 * (second.median / current.median - 1.0):.0f}% "
                             f"slower ({current.median:.0f} vs {second.median:.0f} ms median)")
    gain = _pct(top.median, current.median)
    if pinned is not None:
        return result(False, f"kept {active}: pinned to {pinned} ({best} {gain:.0f}% faster)")
    if gain < 100.0 * margin:
        return result(False, f"kept {active}: {best} {gain:.0f}% faster, below the {margin:.0%} margin")
    if not cis_separated(top, current):
        return result(False, f"kept {active}: {best} {gain:.0f}% faster but the 95% CIs overlap "
                             f"({top.ci_lo:.0f}-{top.ci_hi:.0f} vs {current.ci_lo:.0f}-{current.ci_hi:.0f} ms)")
    return result(True, f"{would} to {best}: {gain:.0f}% faster than {active} "
                        f"({top.median:.0f} vs {current.median:.0f} ms median, CIs separated)")


def model_insights(report: Report, best: str | None) -> tuple[dict[str, float], tuple[str, ...]]:
    """The fitted models' expected wall clock over the benched mix, and where the winner changes."""
    try:
        models = fit_all(report.samples())
    except UsageError as exc:
        return {}, (f"no performance model: {exc.message}",)
    rows = report.results[report.benched()[0]]
    mix = [MixItem(r.task_class, r.prompt_tokens, r.output_tokens) for r in rows]
    expected = {name: expected_wall_ms(model, mix) for name, model in models.items()}
    classes = [r.task_class for r in rows]
    task_class = max(set(classes), key=classes.count)
    prompt = int(statistics.median(r.prompt_tokens for r in rows))
    sentences: list[str] = []
    for name, model in models.items():
        if best is not None and name != best and best in models:
            crossing = crossover_output_tokens(models[best], model, task_class, prompt)
            if crossing is not None:
                sentences.append(crossing.sentence)
    return expected, tuple(sentences)


@dataclass
class TuneResult:
    decision: Decision
    report: Report
    final_profile: str | None = None
    history_detail: str = field(default="")


def guarded_decision(summaries: Mapping[str, Summary], active: str | None, guard: Guard | None, *,
                     margin: float, pinned: str | None, dry_run: bool) -> tuple[Decision, list[str]]:
    """decide, then refuse any winner the guard (the fidelity gate) rejects and decide among the rest."""
    remaining = dict(summaries)
    refused: list[str] = []
    while True:
        decision = decide(remaining, active, margin=margin, pinned=pinned, dry_run=dry_run)
        best = decision.best
        would_switch = decide(remaining, active, margin=margin, pinned=pinned).switch
        if guard is None or best is None or best == active or not would_switch:
            return decision, refused
        reason = guard(best)
        if reason is None:
            return decision, refused
        refused.append(f"not switching to {best}: {reason}")
        del remaining[best]


def tune(target: Target, candidates: Sequence[str], workload: Workload, settings: Settings, *,
         margin: float = 0.05, dry_run: bool = False, pinned: str | None = None,
         progress: Progress | None = None, guard: Guard | None = None) -> TuneResult:
    """Bench the active profile and the candidates (interleaved); decide; end on the winner or the original.

    `guard` (specd.tune.verify.tuner_guard) may veto a winner: the next best that passes is considered instead.
    """
    chosen: list[str | None] = [None]
    with restoring(target, keep=lambda: chosen[0]) as original:
        order = list(dict.fromkeys([*([original] if original else []), *candidates]))
        report = bench_profiles(target, order, workload, settings, progress)
        common = report.common_n()
        summaries = {name: report.summary(name, common) for name in report.benched()} if common else {}
        decision, refused = guarded_decision(summaries, original, guard, margin=margin, pinned=pinned,
                                             dry_run=dry_run)
        report.notes.extend(refused)
        if report.concurrency > 1:
            report.notes.append(f"replayed at concurrency {report.concurrency} (-np as each profile sets it)")
        expected, crossovers = model_insights(report, decision.best) if summaries else ({}, ())
        estimates = tuple(Estimate(**{**asdict(e), "model_wall_ms": expected.get(e.profile)})
                          for e in decision.estimates)
        decision = Decision(**{**asdict(decision), "estimates": estimates, "crossovers": crossovers,
                               "notes": tuple(report.notes), "bench_s": report.elapsed_s,
                               "workload": workload.name})
        if decision.switch:
            chosen[0] = decision.best
    return TuneResult(decision, report, final_profile=target.active())


# -- deployments: workloads, candidates, the CLI's and the daemon's entry points -------------------------


def captured_bodies(deployment: Deployment) -> list[dict[str, Any]]:
    directory = paths.state_dir() / "capture" / deployment.name
    bodies: list[dict[str, Any]] = []
    for path in (directory / f"{CAPTURE_NAME}.1", directory / CAPTURE_NAME):
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    body = json.loads(line)
                except ValueError:
                    continue
                if isinstance(body, dict):
                    bodies.append(body)
    return bodies


def recent_workload(deployment: Deployment, n: int, *, days: float = RECENT_DAYS) -> Workload:
    """Captured bodies replayed when capture is on; else synthetic prompts shaped like the traffic."""
    bodies = captured_bodies(deployment)
    where = paths.state_dir() / "capture" / deployment.name / CAPTURE_NAME
    requests = []
    for number, body in enumerate(bodies[-max(n, 32):], start=1):
        body.setdefault("max_tokens", body.pop("max_completion_tokens", DEFAULT_MAX_TOKENS))
        try:
            requests.append(parse_line(json.dumps(body), where, number))
        except UsageError as exc:
            log.info("recent workload: skipping a captured body: %s", exc.message)
    if requests:
        return Workload(name="recent", requests=tuple(requests), source=where)
    conn = traffic.open_db()
    try:
        records = [r for r in traffic.fetch_records(conn, time.time() - days * 86400, deployment.unit)
                   if 200 <= r.status < 300]
    finally:
        conn.close()
    prompts = [p for r in records if (p := traffic.prompt_length(r))]
    outputs = [o for r in records if (o := traffic.output_length(r))]
    mix: dict[TaskClass, float] = {}
    for record in records:
        for task_class in TASK_CLASSES:
            if record.task_class == task_class:
                mix[task_class] = mix.get(task_class, 0.0) + 1.0
    if not prompts or not outputs or not mix:
        raise UsageError(f"no recorded traffic for {deployment.unit} in the last {days:g} days to build "
                         "the 'recent' workload",
                         hint="run the daemon with its proxy, or pass --workload NAME|FILE (e.g. code, prose)")
    workload = synthesize(mix, prompts, outputs, n=max(n, 16), seed=0, name="recent")
    return workload.at_concurrency(concurrency_level([r.in_flight for r in records]))


def traffic_concurrency(deployment: Deployment, days: float = RECENT_DAYS) -> tuple[int, str | None]:
    """The typical concurrency of recorded traffic, and a sentence when it differs by time of day."""
    conn = traffic.open_db()
    try:
        records = traffic.fetch_records(conn, time.time() - days * 86400, deployment.unit)
    finally:
        conn.close()
    level = concurrency_level([r.in_flight for r in records])
    return level, period_note(concurrency_by_period([(r.ts, r.in_flight) for r in records]))


def resolve_workload(spec: str, deployment: Deployment, n: int) -> Workload:
    return recent_workload(deployment, n) if spec == "recent" else load_workload(spec)


def candidate_profiles(config: Config, deployment: Deployment, explicit: Sequence[str] = ()) -> list[str]:
    """Explicit names, else [tuner] candidates, else every valid non-abstract profile."""
    if explicit:
        return list(explicit)
    if config.tuner.candidates:
        return list(config.tuner.candidates)
    listing = [p.name for p in list_profiles(deployment.profiles_dir) if not p.abstract and p.error is None]
    if not listing:
        raise UsageError(f"{deployment.profiles_dir}: no valid profile to tune over")
    return listing


def record(deployment: Deployment, decision: Decision, trigger: Trigger) -> str:
    """One history event per decision: the sentence, then the numbers as JSON."""
    numbers = {"best": decision.best, "switched": decision.switch, "margin": decision.margin,
               "bench_s": round(decision.bench_s, 1), "workload": decision.workload, "trigger": trigger,
               "estimates": {e.profile: [round(e.median_ms, 1), round(e.ci_lo_ms, 1), round(e.ci_hi_ms, 1), e.n]
                             for e in decision.estimates}}
    detail = f"{decision.reason} | {json.dumps(numbers, separators=(',', ':'))}"
    history = History(paths.db_path())
    try:
        history.event(deployment.unit, "tune-dry-run" if decision.dry_run else "tune", detail)
    finally:
        history.close()
    return detail


def parse_record(detail: str) -> tuple[str, dict[str, Any]]:
    """`record`'s event detail back into (reason, numbers); numbers are {} for a detail without them."""
    reason, sep, numbers = detail.rpartition(" | ")
    if not sep:
        return detail, {}
    try:
        parsed = json.loads(numbers)
    except json.JSONDecodeError:
        return detail, {}
    return (reason, parsed) if isinstance(parsed, dict) else (detail, {})


def tune_deployment(config: Config, deployment: Deployment, *, workload: str | None = None, n: int | None = None,
                    margin: float | None = None, dry_run: bool = False, candidates: Sequence[str] = (),
                    budget_s: float | None = None, trigger: Trigger = "tuner", max_tokens: int | None = None,
                    progress: Progress | None = None, concurrency: int | None = None,
                    cache_reuse: bool = False, verify: bool = True, target: Target | None = None) -> TuneResult:
    """`specd tune` and the nightly job: resolve everything from the config, tune (fidelity-gated), record.

    `target` is what to bench on: the deployment itself (default: each candidate is switched in), or
    a `specd.tune.shadow.ShadowTarget` (the free slot; the caller then switches to the winner)."""
    settings_n = n or config.tuner.n
    chosen = resolve_workload(workload or config.tuner.workload, deployment, settings_n)
    deadline = time.monotonic() + budget_s if budget_s is not None else None
    settings = Settings(n=settings_n, max_tokens=max_tokens, deadline=deadline, concurrency=concurrency,
                        cache_reuse=cache_reuse)
    pin = get_pin(deployment.unit)
    own: DeploymentTarget | None = None
    if target is None:
        target = own = DeploymentTarget(deployment, trigger=trigger)
    guard = tuner_guard(deployment, target, captured_bodies(deployment)) if verify else None
    try:
        result = tune(target, candidate_profiles(config, deployment, candidates), chosen, settings,
                      margin=config.tuner.margin if margin is None else margin, dry_run=dry_run,
                      pinned=pin.profile if pin else None, progress=progress, guard=guard)
    finally:
        if own is not None:
            own.close()  # a target passed in is its caller's to close
    if (workload or config.tuner.workload) == "recent":
        note = traffic_concurrency(deployment)[1]
        if note is not None:
            result.decision = replace(result.decision, notes=(*result.decision.notes, note))
    save_report(result.report, deployment.unit, settings)
    result.history_detail = record(deployment, result.decision, trigger)
    return result


def last_request_age_s(deployment: Deployment, window_s: float) -> float | None:
    """Seconds since the last request seen (proxy rows or sampled counters), None if none in the window."""
    now = time.time()
    conn = traffic.open_db()
    try:
        records = traffic.fetch_records(conn, now - window_s, deployment.unit)
        if records:
            return now - max(r.ts for r in records)
        totals = traffic.counter_totals(conn, now - window_s, deployment.unit)
    finally:
        conn.close()
    busy = any(t.get("predicted_tokens", 0.0) > 0 or t.get("prompt_tokens", 0.0) > 0
               for t in totals.by_profile.values())
    return 0.0 if busy else None


def nightly(config: Config, deployment: Deployment) -> Decision | None:
    """The daemon's cron job; returns the decision, or None when it skipped (and says why in history)."""
    tuner = config.tuner
    if not tuner.enabled:
        return None
    history = History(paths.db_path())
    try:
        pin = get_pin(deployment.unit)
        if pin is not None:
            history.event(deployment.unit, "tune-skip", f"pinned to {pin.profile}")
            return None
        age = last_request_age_s(deployment, tuner.idle_minutes * 60.0)
        if age is not None:
            history.event(deployment.unit, "tune-skip", f"traffic {age / 60.0:.0f} min ago; the tuner waits for "
                                                        f"{tuner.idle_minutes:g} idle minutes")
            return None
    finally:
        history.close()
    try:
        result = tune_deployment(config, deployment, budget_s=tuner.budget_minutes * 60.0, trigger="tuner")
    except SpecdError as exc:
        failed = History(paths.db_path())
        try:
            failed.event(deployment.unit, "tune-failed", str(exc).splitlines()[0])
        finally:
            failed.close()
        raise
    log.info("%s: %s", deployment.unit, result.decision.reason)
    return result.decision
