"""The tuner's decision rule before issue 31, kept only so the accuracy benchmarks can score it beside the
new one on the same samples (specd itself no longer uses it).

It ranked profiles by median wall clock, each with its own 95% bootstrap interval, and switched to the
fastest only when it beat the active profile by the margin AND the two intervals did not overlap
(specd/tune/tuner.py:decide at commit f4f536f).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from specd.tune.stats import cis_separated, summarize


def legacy_pick(walls: Mapping[str, Sequence[float]], active: str, margin: float = 0.05) -> tuple[str, str]:
    """(the profile the old rule ends on, its one-line reason) from each profile's wall clocks."""
    summaries = {name: summarize(list(values), seed=42) for name, values in walls.items() if values}
    if active not in summaries:
        best = min(summaries, key=lambda p: summaries[p].median)
        return best, f"switched to {best}: the active {active} has no samples"
    best = min(summaries, key=lambda p: (summaries[p].median, p))
    top, current = summaries[best], summaries[active]
    if best == active:
        return active, f"kept {active}: fastest"
    gain = (current.median - top.median) / current.median
    if gain < margin:
        return active, f"kept {active}: {best} {gain:.0%} faster, below the margin"
    if not cis_separated(top, current):
        return active, f"kept {active}: {best} {gain:.0%} faster but the 95% CIs overlap"
    return best, f"switched to {best}: {gain:.0%} faster, CIs separated"
