"""The tuner's decision: pure, from paired comparisons with the incumbent to one of four outcomes.

    switch   a candidate's whole interval is below 1 - margin: it is faster by more than the margin
             (the fastest such one wins; "would switch" in a dry run)
    unsure   kept: some candidate is undecided when sampling ended (the cap or the time budget): the
             evidence could not say whether it is faster by the margin
    tied     kept: no candidate can be faster by the margin, and the nearest one's interval sits
             inside +-margin ("tied within 5%: kept plain")
    kept     kept: every candidate is ruled out as faster by the margin and none is tied (slower)

plus `pinned` (the deployment is pinned: the tuner reports what it found and keeps) and `nothing`
(no profile could be benched: which step failed, for each). Each candidate's comparison comes from
specd.tune.paired; the per-profile medians (`Estimate`) are descriptive only. Never decided on
decode rate alone: the ratio is of wall clock, priced per output token only where lengths differed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from specd.tune.paired import Comparison
from specd.tune.stats import Summary

Outcome = Literal["switch", "unsure", "tied", "kept", "pinned", "nothing"]


@dataclass(frozen=True)
class Estimate:
    profile: str
    n: int
    median_ms: float
    ci_lo_ms: float
    ci_hi_ms: float
    high_variance: bool
    model_wall_ms: float | None = None  # the fitted model's expected wall clock over the workload mix
    ratio: float | None = None  # paired: geometric-mean time relative to the incumbent (None: the incumbent)
    ratio_lo: float | None = None
    ratio_hi: float | None = None
    pairs: int = 0
    verdict: str | None = None
    measure: str | None = None  # "wall" or "per-token" (output lengths differed)


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
    traffic: Mapping[str, Any] = field(default_factory=dict)  # specd.tune.bench.bench_traffic
    left_out: Mapping[str, str] = field(default_factory=dict)  # candidate -> why it has no estimate
    outcome: Outcome = "kept"
    level: float | None = None  # the level of each look's interval
    samples: Mapping[str, int] = field(default_factory=dict)  # requests measured per profile
    stopped: str = ""  # why sampling ended

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["estimates"] = {e.profile: {k: (None if v == float("inf") else v) for k, v in asdict(e).items()
                                         if k != "profile"} for e in self.estimates}  # JSON has no infinity
        return data


def _times(ratio: float) -> str:
    if ratio >= 1.95:
        return f"{ratio:.1f}x slower"
    if ratio >= 1.0:
        return f"{100.0 * (ratio - 1.0):.0f}% slower"
    return f"{100.0 * (1.0 - ratio):.0f}% faster"


def evidence(c: Comparison) -> str:
    """The numbers behind a verdict, in words: ratio, interval, requests, rounds, the measure."""
    found = c.interval
    hi = "unbounded" if found.hi == float("inf") else f"{found.hi:.2f}"
    text = (f"ratio {found.ratio:.2f}, {found.level:.1%} interval {found.lo:.2f}-{hi} over {found.pairs} "
            f"requests in {found.rounds} rounds")
    if c.measure == "per-token":
        text += (f"; per output token, as lengths differed in {c.lengths_differ} pairs "
                 f"(wall clock alone: {c.wall.ratio:.2f})")
    return text


def _others(found: Mapping[str, Comparison], but: str | None) -> str:
    rest = [f"{c.candidate} {c.verdict} ({c.interval.ratio:.2f})" for c in found.values() if c.candidate != but]
    return f"; others: {', '.join(rest)}" if rest else ""


def estimates_of(summaries: Mapping[str, Summary], found: Mapping[str, Comparison]) -> tuple[Estimate, ...]:
    """Per profile, fastest first by paired ratio (the incumbent at 1.0): its median and its ratio."""
    def key(name: str) -> tuple[float, float, str]:
        c = found.get(name)
        return (c.interval.ratio if c is not None else 1.0, summaries[name].median, name)

    rows = []
    for name in sorted(summaries, key=key):
        s, c = summaries[name], found.get(name)
        rows.append(Estimate(name, s.n, s.median, s.ci_lo, s.ci_hi, s.high_variance,
                             ratio=c.interval.ratio if c else None, ratio_lo=c.interval.lo if c else None,
                             ratio_hi=c.interval.hi if c else None, pairs=c.interval.pairs if c else 0,
                             verdict=c.verdict if c else None, measure=c.measure if c else None))
    return tuple(rows)


def decide(summaries: Mapping[str, Summary], found: Mapping[str, Comparison], active: str | None, *,
           margin: float = 0.05, pinned: str | None = None, dry_run: bool = False,
           failed: Mapping[str, str] | None = None, level: float | None = None) -> Decision:
    """The outcome (module docstring) from `found`: each benched candidate against `active` (or, when the
    active profile was not benched, against a reference profile); never a switch when pinned."""
    would = "would switch" if dry_run else "switched"
    keep = f"kept {active or 'nothing'}"

    def result(best: str | None, switch: bool, reason: str, outcome: Outcome) -> Decision:
        if pinned is not None and outcome != "pinned":
            reason += f" (pinned to {pinned})"  # said even where the evidence alone would keep
        return Decision(best, active, switch and not dry_run, reason, margin, estimates_of(summaries, found),
                        pinned, dry_run, outcome=outcome, level=level)

    if not summaries:
        why = "; ".join(f"{name}: {text}" for name, text in (failed or {}).items()) or "nothing ran"
        return result(None, False, f"{keep}: no profile could be benched ({why})", "nothing")
    if active is None or active not in summaries:
        why = "no profile was active" if active is None else f"the active {active} could not be benched"
        faster = sorted(found.values(), key=lambda c: c.interval.ratio)
        if faster and faster[0].interval.ratio < 1.0:
            best, text = faster[0].candidate, f"fastest ({evidence(faster[0])} against {faster[0].incumbent})"
        else:
            best = next(iter(found.values())).incumbent if found else min(summaries, key=lambda p: summaries[p].median)
            text = f"fastest ({summaries[best].median:.0f} ms median)"
        if pinned is not None:
            return result(best, False, f"{keep}: pinned to {pinned}; {best} is fastest", "pinned")
        return result(best, True, f"{would} to {best}: {text}; {why}", "switch")
    faster = sorted((c for c in found.values() if c.verdict == "faster"), key=lambda c: c.interval.ratio)
    if faster:
        top = faster[0]
        if pinned is not None:
            return result(top.candidate, False, f"{keep}: pinned to {pinned} ({top.candidate} "
                                                f"{_times(top.interval.ratio)}, {evidence(top)})", "pinned")
        return result(top.candidate, True, f"{would} to {top.candidate}: {_times(top.interval.ratio)} than {active} "
                                            f"({evidence(top)}){_others(found, top.candidate)}", "switch")
    nearest = min(found.values(), key=lambda c: c.interval.ratio) if found else None
    best = nearest.candidate if nearest is not None and nearest.interval.ratio < 1.0 else active
    unclear = sorted((c for c in found.values() if c.verdict == "unclear"), key=lambda c: c.interval.ratio)
    if unclear:
        top = unclear[0]
        return result(best, False, f"{keep}: not enough evidence within the bench's budget: {top.candidate} "
                                   f"{_times(top.interval.ratio)} ({evidence(top)}; a switch needs the interval "
                                   f"below {1.0 - margin:.2f}){_others(found, top.candidate)}", "unsure")
    tied = sorted((c for c in found.values() if c.verdict == "tied"), key=lambda c: c.interval.ratio)
    if tied:
        top = tied[0]
        return result(best, False, f"tied within {margin:.0%}: {keep} ({top.candidate} {evidence(top)})"
                                   f"{_others(found, top.candidate)}", "tied")
    if nearest is None:
        return result(active, False, f"{keep}: the only profile benched", "kept")
    lead = "fastest" if all(c.verdict == "slower" for c in found.values()) else f"no candidate is {margin:.0%} faster"
    return result(best, False, f"{keep}: {lead}; {nearest.candidate} {_times(nearest.interval.ratio)} "
                               f"({evidence(nearest)}){_others(found, nearest.candidate)}", "kept")
