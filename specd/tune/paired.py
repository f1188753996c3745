"""Paired evidence: each candidate against the incumbent on the same requests, with an honest interval.

The bench replays the same requests (same prompt, same seed, same position in the plan) on every
profile, interleaved round by round. A request's wall clock mixes the profile's speed with the
request's own size and with whatever the box was doing; the ratio of a candidate's wall clock to
the incumbent's on the *same* request cancels the size, and the round-by-round interleaving makes
load drift hit both sides alike. So the decision is on the mean of log(candidate / incumbent) over
the shared requests: its exponential is the geometric-mean speed ratio (0.80 = 20% faster). Each pair
weighs by its request's size (the geometric mean of its two wall clocks, symmetric in the two sides
so noise on either side does not tilt it), so a mix of short and long requests is judged as its
total wall clock would be, not by counting a 100 ms request as much as a 60 s one.

Why the interval is a t interval over rounds, not a bootstrap over requests (docs/tuner.md): the
requests of one profile in one round run back to back, so a disturbance (a build, a cron job)
lands on all of them together; treating them as independent would make the interval too narrow
exactly when the box is noisy. The round is the unit that is independent, so the variance of the
mean is estimated from the rounds' means (the cluster-robust CR1 estimator, weighted by requests)
with R - 1 degrees of freedom, which is exact for normal round means and does not undercover with
few rounds the way a percentile bootstrap does.

Where output lengths differ between the two sides of a pair (sampled requests stop at different
places), wall clock would read a length difference as a speed difference: each side is then
priced at the pair's mean output length from its own decode time per token (prefill and the
rest are kept), and the comparison says it used that measure.

Verdicts against `margin` m (0.05: a switch must buy at least 5%), on the log scale so that
"5% faster" and "5% slower" are the same distance from even: faster (the whole interval below
1 - m), slower (the whole interval above 1 / (1 - m)), tied (the whole interval inside both),
not-faster (the interval rules out a gain of m but not a loss of more than m), unclear (it does not
rule out a gain of m and does not show one).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np
from scipy import stats as scipy_stats

from specd.errors import UsageError

Verdict = Literal["faster", "slower", "tied", "not-faster", "unclear"]
Measure = Literal["wall", "per-token"]
DECIDED: frozenset[Verdict] = frozenset({"faster", "slower", "tied", "not-faster"})
ALPHA = 0.05  # the chance of a false switch the whole sequence of looks may spend, per candidate, both sides
BUSY_PRESSURE = 0.25  # a sample whose CPU pressure (share of time a task waited for a CPU) reached this was busy


class Sample(Protocol):
    """What pairing needs of one measured request (specd.tune.bench.Result has it)."""

    @property
    def position(self) -> int: ...
    @property
    def round(self) -> int: ...
    @property
    def request_index(self) -> int: ...
    @property
    def wall_ms(self) -> float: ...
    @property
    def decode_ms(self) -> float: ...
    @property
    def output_tokens(self) -> int: ...
    @property
    def box_load(self) -> float | None: ...
    @property
    def live_load(self) -> int | None: ...


@dataclass(frozen=True)
class Pair:
    """One request position run by both profiles."""

    position: int
    round: int
    request: int  # the request's index in the workload (its replays share it)
    weight: float  # the request's size: sqrt(candidate wall x incumbent wall), in ms
    wall_log_ratio: float  # log(candidate wall / incumbent wall)
    cost_log_ratio: float  # the same at the pair's mean output length (= wall_log_ratio when lengths match)
    lengths_differ: bool
    quiet: bool  # neither side ran on a busy box or beside live traffic


@dataclass(frozen=True)
class Interval:
    """A ratio (candidate / incumbent) and its interval at `level`, from `pairs` requests in `rounds` rounds."""

    ratio: float
    lo: float
    hi: float
    level: float
    pairs: int
    rounds: int
    by_request: bool = False  # the workload's requests as the population (each replayed at least twice)

    def as_list(self) -> list[float | int]:
        return [round(self.ratio, 4), round(self.lo, 4), round(self.hi, 4), self.pairs, self.rounds]


@dataclass(frozen=True)
class Comparison:
    candidate: str
    incumbent: str
    measure: Measure
    interval: Interval  # on `measure`: what the verdict reads
    wall: Interval  # wall clock alone (the same as `interval` when measure == "wall")
    verdict: Verdict
    lengths_differ: int  # pairs whose output lengths differed
    busy_pairs: int  # pairs where either side ran on a busy box or beside live traffic

    @property
    def gain_pct(self) -> float:
        """How much faster the candidate is, in percent of the incumbent's time (negative: slower)."""
        return 100.0 * (1.0 - self.interval.ratio)

    def as_json(self) -> dict[str, object]:
        return {"vs": self.incumbent, "measure": self.measure, "ratio": self.interval.as_list(),
                "wall_ratio": self.wall.as_list(), "level": round(self.interval.level, 4), "verdict": self.verdict,
                "lengths_differ": self.lengths_differ, "busy_pairs": self.busy_pairs}


def _cost_at(sample: Sample, tokens: float) -> float:
    """The sample's wall clock had it produced `tokens` output tokens: its decode time per token times the
    difference, added to (or taken from) what it measured."""
    if sample.output_tokens <= 0 or sample.decode_ms <= 0:
        return sample.wall_ms
    return max(sample.wall_ms + (tokens - sample.output_tokens) * sample.decode_ms / sample.output_tokens, 1e-3)


def _busy(sample: Sample) -> bool:
    return (sample.box_load is not None and sample.box_load >= BUSY_PRESSURE) or bool(sample.live_load)


def pairs_of(candidate: Sequence[Sample], incumbent: Sequence[Sample]) -> list[Pair]:
    """The positions both ran, in plan order."""
    mine = {s.position: s for s in incumbent if s.wall_ms > 0}
    found = []
    for theirs in candidate:
        own = mine.get(theirs.position)
        if own is None or theirs.wall_ms <= 0:
            continue
        differ = theirs.output_tokens != own.output_tokens and theirs.output_tokens > 0 and own.output_tokens > 0
        mean_tokens = (theirs.output_tokens + own.output_tokens) / 2.0
        wall = math.log(theirs.wall_ms / own.wall_ms)
        cost = math.log(_cost_at(theirs, mean_tokens) / _cost_at(own, mean_tokens)) if differ else wall
        found.append(Pair(theirs.position, theirs.round, theirs.request_index, math.sqrt(theirs.wall_ms * own.wall_ms),
                          wall, cost, differ, not (_busy(theirs) or _busy(own))))
    return sorted(found, key=lambda p: p.position)


@functools.lru_cache(maxsize=512)
def _t_quantile(probability: float, freedom: float) -> float:
    return float(scipy_stats.t.ppf(probability, freedom))


def effective_rounds(weights: np.ndarray, labels: np.ndarray, groups: Sequence[int]) -> float:
    """Kish's effective number of rounds, from each round's total weight: R when the rounds weigh the
    same, fewer when a few heavy rounds carry the mean. The t interval's degrees of freedom are capped
    by it less one: with few rounds of unequal weight the rounds' spread is known less well than R - 1
    says, and at the tail a look reads (99.3%) that made the interval too narrow (a candidate exactly
    at the margin was called faster at 4 rounds in 0.9% of seeded runs where 0.36% was allowed)."""
    totals = np.array([float(weights[labels == g].sum()) for g in groups])
    return float(totals.sum() ** 2 / (totals ** 2).sum())


def interval(values: Sequence[float], rounds: Sequence[int], level: float,
             weights: Sequence[float] | None = None, requests: Sequence[int] | None = None) -> Interval:
    """exp of the (weighted) mean log ratio and its t interval over rounds (CR1, R - 1 degrees of freedom,
    fewer when the rounds weigh unequally: `effective_rounds`).

    With `requests` (each pair's request in the workload) and every request replayed at least twice, the
    workload's own requests are the population: the mean is over requests (each its replicates' mean,
    weighted by its size) and the spread is the replicates' around their request's mean, still summed
    by round, so a difference between requests is not read as noise. Otherwise the requests stand for a
    sample of the traffic and their differences count as uncertainty. With a single round the rounds'
    spread is unknown: the interval is unbounded (nothing is decided).
    """
    if not 0.0 < level < 1.0:
        raise UsageError(f"an interval's level must be between 0 and 1, not {level}")
    if len(values) != len(rounds) or not values or (weights is not None and len(weights) != len(values)):
        raise UsageError("no paired samples to compare")
    logs = np.asarray(values, dtype=np.float64)
    w = np.ones_like(logs) if weights is None else np.asarray(weights, dtype=np.float64)
    labels = np.asarray(rounds)
    groups = sorted(set(rounds))
    count = len(groups)
    strata = np.asarray(requests) if requests is not None else None
    kinds = sorted(set(requests)) if requests is not None else []
    if strata is not None and all(int((strata == s).sum()) >= 2 for s in kinds):
        sizes = {s: float(w[strata == s].mean()) for s in kinds}
        means = {s: float(logs[strata == s].mean()) for s in kinds}
        replicas = {s: int((strata == s).sum()) for s in kinds}
        total = sum(sizes.values())
        mean = sum(sizes[s] * means[s] for s in kinds) / total
        inflate = {s: math.sqrt(replicas[s] / (replicas[s] - 1)) for s in kinds}  # a mean's residuals run small
        influence = np.array([sizes[s] / (total * replicas[s]) * (x - means[s]) * inflate[s]
                              for x, s in zip(logs, strata.tolist(), strict=True)])
        freedom = max(1, min(count - 1, len(values) - len(kinds)))
        stratified = True
    else:
        total = float(w.sum())
        mean = float((w * logs).sum()) / total
        influence = w * (logs - mean) / total
        freedom, stratified = count - 1, False
    if count < 2:
        return Interval(math.exp(mean), 0.0, math.inf, level, len(values), count, stratified)
    sums = np.array([float(influence[labels == g].sum()) for g in groups])
    variance = count / (count - 1) * float((sums ** 2).sum())
    half = _t_quantile(0.5 + level / 2.0, max(1.0, min(freedom, effective_rounds(w, labels, groups) - 1.0))) \
        * math.sqrt(variance)
    return Interval(math.exp(mean), math.exp(mean - half), math.exp(mean + half), level, len(values), count,
                    stratified)


def verdict_of(found: Interval, margin: float) -> Verdict:
    if not 0.0 <= margin < 1.0:
        raise UsageError(f"margin must be between 0 and 1 (0.05 = 5%), not {margin}")
    gain, loss = 1.0 - margin, 1.0 / (1.0 - margin)
    if found.hi < gain:
        return "faster"
    if found.lo > loss:
        return "slower"
    if found.lo >= gain:
        return "tied" if found.hi <= loss else "not-faster"
    return "unclear"


def compare(candidate: str, incumbent: str, pairs: Sequence[Pair], level: float, margin: float, *,
            unseen: bool = False) -> Comparison:
    """The candidate against the incumbent on their shared requests, per-token when lengths differed.

    By default the bench's requests are the population (the recorded traffic, replayed): the interval is
    over rounds. `unseen`: the requests stand for others of their kind not yet seen (a task class's
    route serves future prompts), so the distinct request is the unit: the interval is over requests,
    each its replays' mean, and a difference between requests counts as uncertainty."""
    if not pairs:
        raise UsageError(f"{candidate} and {incumbent} share no measured request")
    weights, requests = [p.weight for p in pairs], [p.request for p in pairs]
    clusters = requests if unseen else [p.round for p in pairs]
    strata = None if unseen else requests
    wall = interval([p.wall_log_ratio for p in pairs], clusters, level, weights, strata)
    differ = sum(p.lengths_differ for p in pairs)
    measure: Measure = "per-token" if differ else "wall"
    cost = interval([p.cost_log_ratio for p in pairs], clusters, level, weights, strata) if differ else wall
    return Comparison(candidate, incumbent, measure, cost, wall, verdict_of(cost, margin), differ,
                      sum(not p.quiet for p in pairs))


# -- the sequential plan: when to look, at which level ------------------------------------------------


@dataclass(frozen=True)
class Looks:
    """A fixed schedule of looks (requests per profile at which the evidence is read) and the level of
    each: the false-switch chance ALPHA is split evenly over the looks (Bonferroni), so looking K times
    never spends more than looking once at ALPHA would."""

    at: tuple[int, ...]
    alpha: float = ALPHA

    @property
    def level(self) -> float:
        return 1.0 - self.alpha / len(self.at)

    @property
    def cap(self) -> int:
        return self.at[-1]

    def due(self, pairs: int, done: int) -> bool:
        """Whether a look is due with `pairs` shared requests when `done` looks were taken."""
        return done < len(self.at) and pairs >= self.at[done]


def schedule(n: int, floor: int, cap: int) -> Looks:
    """Looks at `floor` (a clear loser leaves early), at n, then at each doubling (2n, 4n, ...) up to `cap`.

    Doubling keeps the looks few while the cap is far: for n = 10 and a cap of 320 seven looks (at
    99.3% each) reach eight times further than five evenly spaced ones (at 99%) reach to 40; an
    interval's width shrinks with the square root of the pairs, so the later looks are where a real
    gain near the margin on a noisy box gets decided."""
    if not 1 <= floor <= n <= cap:
        raise UsageError(f"need 1 <= floor <= n <= cap, not {floor}, {n}, {cap}")
    doublings, at = [], n
    while at <= cap:
        doublings.append(at)
        at *= 2
    return Looks(tuple(sorted({floor, *doublings, cap})))


def comparisons(rows: Mapping[str, Sequence[Sample]], incumbent: str, level: float, margin: float,
                *, quiet_only: bool = False) -> dict[str, Comparison]:
    """Every other benched profile against the incumbent (quiet pairs only, when asked)."""
    found: dict[str, Comparison] = {}
    for name, samples in rows.items():
        if name == incumbent or not samples:
            continue
        shared = pairs_of(samples, rows.get(incumbent, ()))
        if quiet_only:
            shared = [p for p in shared if p.quiet]
        if shared:
            found[name] = compare(name, incumbent, shared, level, margin)
    return found


def noise_notes(rows: Mapping[str, Sequence[Sample]], incumbent: str, found: Mapping[str, Comparison],
                deciding: str | None, level: float, margin: float, *, seen: bool = True) -> list[str]:
    """What the box's noise did to the evidence: how many pairs ran busy, whether the quiet pairs alone
    would have decided otherwise (then noise, not the profiles, decided), and whether one side ran busier."""
    notes = []
    if not seen:
        notes.append("the box's CPU pressure could not be read (no /proc/pressure/cpu): noise on the box is not seen")
    pairs = sum(c.interval.pairs for c in found.values())
    busy = sum(c.busy_pairs for c in found.values())
    if busy:
        notes.append(f"{busy} of {pairs} paired requests ran on a busy box (CPU pressure >= {BUSY_PRESSURE:.0%}) "
                     "or beside live traffic")
    chosen = found.get(deciding) if deciding is not None else None
    if deciding is not None and chosen is not None and chosen.busy_pairs:
        quiet = comparisons({deciding: rows.get(deciding, ()), incumbent: rows.get(incumbent, ())},
                            incumbent, level, margin, quiet_only=True).get(deciding)
        if quiet is None or quiet.interval.rounds < 2:
            notes.append(f"too few quiet pairs of {deciding} and {incumbent} "
                         f"({quiet.interval.pairs if quiet else 0}) to tell whether noise decided the outcome")
        elif quiet.verdict != chosen.verdict:
            notes.append(f"noise decided the outcome: on their {quiet.interval.pairs} quiet pairs alone, {deciding} "
                         f"would be {quiet.verdict} against {incumbent} (ratio {quiet.interval.ratio:.2f}, interval "
                         f"{quiet.interval.lo:.2f}-{quiet.interval.hi:.2f}), not {chosen.verdict}")
        else:
            notes.append(f"the {quiet.interval.pairs} quiet pairs alone say the same: {deciding} {quiet.verdict} "
                         f"(ratio {quiet.interval.ratio:.2f})")
    for name in found:
        own = {s.position: s.box_load for s in rows.get(name, ()) if s.box_load is not None}
        theirs = {s.position: s.box_load for s in rows.get(incumbent, ()) if s.box_load is not None}
        shared = sorted(set(own) & set(theirs))
        if len(shared) < 2:
            continue
        mine = float(np.mean([own[p] for p in shared]))
        other = float(np.mean([theirs[p] for p in shared]))
        if abs(mine - other) >= 0.15:
            busier, calmer = (name, incumbent) if mine > other else (incumbent, name)
            notes.append(f"the box was busier while {busier} ran than while {calmer} ran (mean CPU pressure "
                         f"{max(mine, other):.0%} vs {min(mine, other):.0%} over {len(shared)} pairs)")
    return notes
