"""The tuner: bench the candidate profiles on a workload against the active one, maybe switch.

`tune` benches through a `Target` with the paired sequential rule (specd.tune.sequential: each
candidate against the incumbent on the same requests, sampled until decided, the cap or the time
budget), decides (specd.tune.decision: switch only when a candidate's whole interval clears the
margin; tied, not enough evidence, or kept otherwise; never when pinned), says what the box's
noise did (specd.tune.paired.noise_notes), and leaves the box on the winner or on the original
profile. `tune_deployment` resolves a deployment's candidates, workload and verify gate and
records the decision in history with its numbers and the traffic it was measured on (the nightly
job around it is specd.tune.night).
"""

from __future__ import annotations

import json
import logging
import statistics
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from specd import paths
from specd.deploy.history import History, Trigger
from specd.deploy.seams import SeamsFactory
from specd.errors import UsageError
from specd.profiles.config import Config, Deployment
from specd.profiles.load import list_profiles
from specd.tune import activity
from specd.tune.bench import DeploymentTarget, Progress, Report, Settings, Target, bench_profiles, restoring
from specd.tune.benchstore import save_report
from specd.tune.decision import Decision, Estimate, decide
from specd.tune.paired import Comparison, comparisons, noise_notes
from specd.tune.perfmodel import MixItem, crossover_output_tokens, expected_wall_ms, fit_all
from specd.tune.periods import Period
from specd.tune.pins import pin_in_force
from specd.tune.recent import captured_bodies, resolve_workload
from specd.tune.sequential import PairedRule
from specd.tune.stats import Summary
from specd.tune.targets import Interruptible
from specd.tune.verify import Guard, fingerprint, needs_verification, tuner_guard
from specd.tune.workloads import Workload, period_note

log = logging.getLogger(__name__)
__all__ = ["Decision", "Estimate", "TuneResult", "candidate_profiles", "decide", "record", "tune",
           "tune_deployment"]


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
    activities: dict[str, activity.Activity] = field(default_factory=dict)  # speculation seen working, per profile


def guarded_decision(summaries: Mapping[str, Summary], found: Mapping[str, Comparison], active: str | None,
                     guard: Guard | None, *, margin: float, pinned: str | None, dry_run: bool,
                     failed: Mapping[str, str], level: float | None) -> tuple[Decision, list[str]]:
    """decide, then refuse any winner the guard (the fidelity gate) rejects and decide among the rest."""
    remaining, rivals = dict(summaries), dict(found)
    refused: list[str] = []
    while True:
        decision = decide(remaining, rivals, active, margin=margin, pinned=pinned, dry_run=dry_run, failed=failed,
                          level=level)
        best = decision.best
        would_switch = decision.outcome == "switch"
        if guard is None or best is None or best == active or not would_switch:
            return decision, refused
        reason = guard(best)
        if reason is None:
            return decision, refused
        refused.append(f"not switching to {best}: {reason}")
        del remaining[best]
        rivals.pop(best, None)


def left_out_of(order: Sequence[str], summaries: Mapping[str, Summary],
                activities: Mapping[str, activity.Activity], notes: Sequence[str]) -> dict[str, str]:
    """Each profile asked for that has no estimate, and why: a fleet table shows it rather than drop the row."""
    reasons: dict[str, str] = {}
    for name in order:
        if name in summaries:
            continue
        seen = activities.get(name)
        bench_note = next((n.removeprefix(f"{name}: ") for n in notes if n.startswith(f"{name}: not benched")), None)
        if seen is not None and seen.excluded:
            reasons[name] = f"left out: {activity.INACTIVE} (no token drafted in {seen.requests} requests)"
        else:
            reasons[name] = bench_note or "not benched"
    return reasons


def tune(target: Target, candidates: Sequence[str], workload: Workload, settings: Settings, *,
         margin: float = 0.05, dry_run: bool = False, pinned: str | None = None,
         progress: Progress | None = None, guard: Guard | None = None,
         speculative: Callable[[str], bool] | None = None,
         on_winner: Callable[[str], str] | None = None) -> TuneResult:
    """Bench the active profile and the candidates (interleaved); decide; end on the winner or the original.

    `guard` (specd.tune.verify.tuner_guard) may veto a winner: the next best that passes is considered instead.
    `speculative` says which profiles configure a speculator: one whose requests drafted nothing is left
    out of the decision (specd.tune.activity), unless it is the active one (the baseline stays).
    `on_winner` turns the winner into the profile to end on (a sweep writes a winning variant's file).
    """
    activities: dict[str, activity.Activity] = {}
    chosen: list[str | None] = [None]
    with restoring(target, keep=lambda: chosen[0]) as original:
        order = list(dict.fromkeys([*([original] if original else []), *candidates]))
        rule = PairedRule(original or order[0], settings.n, settings.floor, settings.cap, margin)
        report = bench_profiles(target, order, workload, settings, progress, rule=rule)
        rows = {name: report.results[name] for name in report.benched()}
        if speculative is not None:
            activities = activity.judge_report(report, speculative)
            report.notes.extend(activity.notes(activities.values()))
            for name, seen in activities.items():
                if seen.excluded:
                    report.notes.append(activity.excluded_note(seen, original))
                    if name != original:
                        rows.pop(name, None)
        summaries = {name: report.summary(name) for name in rows}
        reference = original if original in rows else next(iter(rows), None)
        found = comparisons(rows, reference, rule.level, margin) if reference is not None else {}
        decision, refused = guarded_decision(summaries, found, original, guard, margin=margin, pinned=pinned,
                                             dry_run=dry_run, failed=report.failed, level=rule.level)
        report.notes.extend(refused)
        if reference is not None and found:
            deciding = decision.best if decision.best in found else min(found, key=lambda p: found[p].interval.ratio)
            report.notes.extend(noise_notes(rows, reference, found, deciding, rule.level, margin,
                                            seen=report.box_load_seen))
        if report.concurrency > 1:
            report.notes.append(f"replayed at concurrency {report.concurrency} (-np as each profile sets it)")
        by_period = report.traffic.get("concurrency_by_period") or {}
        if (note := period_note(by_period)) is not None:
            report.notes.append(note)
        expected, crossovers = model_insights(report, decision.best) if summaries else ({}, ())
        estimates = tuple(Estimate(**{**asdict(e), "model_wall_ms": expected.get(e.profile)})
                          for e in decision.estimates)
        decision = Decision(**{**asdict(decision), "estimates": estimates, "crossovers": crossovers,
                               "notes": tuple(report.notes), "bench_s": report.elapsed_s,
                               "workload": workload.name, "traffic": report.traffic,
                               "left_out": left_out_of(order, summaries, activities, report.notes),
                               "samples": {p: len(report.results.get(p, [])) for p in order},
                               "stopped": report.stop_reason})
        if decision.switch and decision.best is not None:
            chosen[0] = on_winner(decision.best) if on_winner is not None else decision.best
    return TuneResult(decision, report, final_profile=target.active(), activities=activities)


# -- deployments: candidates, the verify gate, history; the CLI's and the nightly job's entry point -------------


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


def _finite(value: float | None) -> float | None:
    return None if value is None or value == float("inf") else round(value, 4)


def record(deployment: Deployment, decision: Decision, trigger: Trigger, extra: Mapping[str, Any] | None = None) -> str:
    """One history event per decision: the sentence, then the numbers (and the traffic they were
    measured on) as JSON."""
    numbers = {"best": decision.best, "active": decision.active, "switched": decision.switch, "margin": decision.margin,
               "outcome": decision.outcome, "bench_s": round(decision.bench_s, 1), "workload": decision.workload,
               "trigger": trigger,
               "estimates": {e.profile: [round(e.median_ms, 1), round(e.ci_lo_ms, 1), round(e.ci_hi_ms, 1), e.n]
                             for e in decision.estimates},
               "paired": {e.profile: [round(e.ratio, 4), round(e.ratio_lo or 0.0, 4), _finite(e.ratio_hi),
                                      e.pairs, e.verdict, e.measure]
                          for e in decision.estimates if e.ratio is not None},
               "level": decision.level, "samples": dict(decision.samples), "stopped": decision.stopped,
               "notes": list(decision.notes), **(extra or {}), "traffic": dict(decision.traffic)}
    detail = f"{decision.reason} | {json.dumps(numbers, separators=(',', ':'))}"
    history = History(paths.db_path())
    try:
        history.event(deployment.unit, "tune-dry-run" if decision.dry_run else "tune", detail)
    finally:
        history.close()
    return detail



def _watched(guard: Guard, outcomes: dict[str, str]) -> Guard:
    """The guard, noting what it said of each profile (for the history event)."""
    def checked(profile: str) -> str | None:
        reason = guard(profile)
        outcomes[profile] = "ok" if reason is None else reason
        return reason
    return checked


def tune_deployment(config: Config, deployment: Deployment, *, seams: SeamsFactory,
                    workload: str | Workload | None = None,
                    n: int | None = None, max_n: int | None = None, margin: float | None = None,
                    dry_run: bool = False,
                    candidates: Sequence[str] = (), budget_s: float | None = None, deadline: float | None = None,
                    trigger: Trigger = "tuner", max_tokens: int | None = None, progress: Progress | None = None,
                    concurrency: int | None = None, cache_reuse: bool | None = None,
                    temperature: float | None = None, period: Period | None = None, verify: bool = True,
                    stop: threading.Event | None = None, extra: Mapping[str, Any] | None = None,
                    target: Target | None = None, on_winner: Callable[[str], str] | None = None) -> TuneResult:
    """`specd tune` and the nightly job: resolve everything from the config, tune (fidelity-gated), record.

    `stop` (the nightly job's): once set, no request or switch starts except the one back to the live
    profile, and specd.errors.Interrupted propagates after it. `target` is what to bench on: the
    deployment itself (default: each candidate is switched in), or a `specd.tune.shadow.ShadowTarget`
    (the free slot; the caller then switches to the winner).
    """
    settings_n = n or config.tuner.n
    if max_n is None and config.tuner.max_n is not None and config.tuner.max_n < settings_n:
        raise UsageError(f"{config.path}: [tuner] max_n = {config.tuner.max_n} is below --n {settings_n}; "
                         "pass --max-n too, or a smaller --n")
    chosen = workload if isinstance(workload, Workload) else resolve_workload(
        workload or config.tuner.workload, deployment, settings_n, period)
    if deadline is None and budget_s is not None:
        deadline = time.monotonic() + budget_s
    settings = Settings(n=settings_n, max_tokens=max_tokens, deadline=deadline, concurrency=concurrency,
                        cache_reuse=cache_reuse, temperature=temperature,
                        max_n=max_n if max_n is not None else config.tuner.max_n)
    pin = pin_in_force(deployment.unit, time.time())
    own: DeploymentTarget | None = None
    if target is None:
        target = own = DeploymentTarget(deployment, seams=seams, trigger=trigger)
    if stop is not None:
        target = Interruptible(target, stop)
    verdicts: dict[str, str] = {}
    guard = _watched(tuner_guard(deployment, target, captured_bodies(deployment)), verdicts) if verify else None
    try:
        result = tune(target, candidate_profiles(config, deployment, candidates), chosen, settings,
                      margin=config.tuner.margin if margin is None else margin, dry_run=dry_run,
                      pinned=pin.profile if pin else None, progress=progress, guard=guard,
                      speculative=lambda name: needs_verification(deployment, name), on_winner=on_winner)
    finally:
        if own is not None:
            own.close()  # a target passed in is its caller's to close
    save_report(result.report, deployment.unit, settings)
    activity.save(deployment.unit, result.activities.values(),
                  {name: fingerprint(deployment, name) for name in result.activities})
    result.history_detail = record(deployment, result.decision, trigger,
                                   {**(extra or {}), **({"verify": verdicts} if verify else {})})
    return result
