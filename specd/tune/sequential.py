"""When a bench has seen enough: the rules the bench loop asks after every round.

`SeparationRule` is `specd bench`'s (a descriptive bench with no incumbent): n requests per
profile, and a profile whose median's 95% interval is apart from every rival's leaves early.

`PairedRule` is the tuner's: every candidate is compared with the incumbent on their shared
requests (specd.tune.paired) at a fixed schedule of looks — at the floor, at n, then at each
doubling (2n, 4n, ...) up to the cap (32n unless told; the time budget ends it first in practice) —
each look at the level that keeps the false-switch chance of all looks together at 5%
(specd.tune.paired.Looks). At a look, a candidate whose verdict is decided (faster, slower, tied,
not faster) leaves the rotation; the others keep being sampled, in more rounds (and, for sampled
requests, with fresh seeds), until they are decided, the cap is reached or the time budget ends
the bench (the bench loop's deadline). The incumbent runs in every round while any candidate does,
so every candidate sample has its pair.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from specd.tune.paired import DECIDED, Looks, comparisons, schedule
from specd.tune.stats import cis_separated

if TYPE_CHECKING:
    from specd.tune.bench import Report


class Rule(Protocol):
    """What the bench loop asks: how many requests per profile at most, and after each round who leaves
    and whether to stop (a sentence saying why, or None)."""

    @property
    def cap(self) -> int: ...

    def after_round(self, report: Report, rotation: Sequence[str], last: bool) -> tuple[list[str], str | None]: ...


class SeparationRule:
    """n requests per profile; a profile whose 95% interval is apart from every rival's leaves early."""

    def __init__(self, n: int, floor: int, early_stop: bool = True) -> None:
        self.n, self.floor, self.early_stop = n, floor, early_stop

    @property
    def cap(self) -> int:
        return self.n

    def after_round(self, report: Report, rotation: Sequence[str], last: bool) -> tuple[list[str], str | None]:
        if last or not self.early_stop:
            return [], None
        leaving = []
        for profile in rotation:
            rivals = [p for p in report.benched() if p != profile]
            if not rivals:
                continue
            apart = True
            for rival in rivals:
                k = min(len(report.results[profile]), len(report.results[rival]))
                if k < self.floor or not cis_separated(report.summary(profile, k), report.summary(rival, k)):
                    apart = False
                    break
            if apart:
                leaving.append(profile)
        for profile in leaving:
            report.left[profile] = f"its 95% interval was apart from every rival's after {len(report.results[profile])}"
        return leaving, None


class PairedRule:
    """The tuner's sequential plan against `incumbent` (see the module docstring)."""

    def __init__(self, incumbent: str, n: int, floor: int, cap: int, margin: float) -> None:
        self.incumbent, self.margin = incumbent, margin
        self.looks: Looks = schedule(n, floor, max(cap, n))
        self.taken = 0

    @property
    def cap(self) -> int:
        return self.looks.cap

    @property
    def level(self) -> float:
        return self.looks.level

    def after_round(self, report: Report, rotation: Sequence[str], last: bool) -> tuple[list[str], str | None]:
        rows = report.results
        if self.incumbent not in rotation:
            return [], None  # the incumbent could not be benched: nothing is paired (the decision says so)
        rivals = [p for p in rotation if p != self.incumbent]
        if not rivals:
            return [], "every candidate was decided" if self.taken else "there was no candidate to compare"
        shared = min(len(rows.get(p, ())) for p in rivals)
        if not (self.looks.due(shared, self.taken) or last):
            return [], None
        self.taken += 1
        found = comparisons({p: rows.get(p, []) for p in [self.incumbent, *rivals]}, self.incumbent,
                            self.level, self.margin)
        leaving = [p for p in rivals if p in found and found[p].verdict in DECIDED]
        for profile in leaving:
            report.left[profile] = (f"decided ({found[profile].verdict}) at look {self.taken} of "
                                    f"{len(self.looks.at)}, {found[profile].interval.pairs} requests")
        if len(leaving) == len(rivals):
            return leaving, f"every candidate was decided at look {self.taken} of {len(self.looks.at)}"
        if self.taken >= len(self.looks.at):
            return leaving, f"the sample cap ({self.cap} requests per profile) was reached"
        return leaving, None
