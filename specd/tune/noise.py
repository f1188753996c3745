"""How busy the box was while a bench sample ran, and waiting for a quieter moment.

A wall-clock sample measures the profile and whatever else the box was doing. The kernel's CPU
pressure stall information (`/proc/pressure/cpu`, Linux 4.20+) says for how much of a span at least
one runnable task waited for a CPU: 0 on a box with a core to spare, near 1 when every core is
contended. Read at a request's start and end it gives that request's share of contended time —
the bench's own server threads included, so a profile that oversubscribes the cores shows up too.
Where the file is missing (another kernel, a container without it) every reading is None and the
bench says it could not see the box's load.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

PRESSURE = Path("/proc/pressure/cpu")
QUIET_AVG10 = 0.5  # the 10-second average below which the box counts as quiet enough to (re)start on
MIN_SPAN_S = 0.02  # shorter spans (in-process model targets) say nothing about the box


def _read_some(path: Path) -> tuple[float, float] | None:
    """(avg10 as a fraction, total stalled seconds) of the `some` line, or None where there is none."""
    try:
        text = path.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("some "):
            fields = dict(part.split("=", 1) for part in line.split()[1:] if "=" in part)
            try:
                return float(fields["avg10"]) / 100.0, float(fields["total"]) / 1e6
            except (KeyError, ValueError):
                return None
    return None


@dataclass(frozen=True)
class Reading:
    at: float  # time.monotonic()
    stalled_s: float


class BoxLoad:
    """CPU pressure readings; `span` turns two of them into the share of contended time between them."""

    def __init__(self, path: Path = PRESSURE, clock: Callable[[], float] = time.monotonic) -> None:
        self.path, self.clock = path, clock
        self.available = _read_some(path) is not None

    def read(self) -> Reading | None:
        found = _read_some(self.path) if self.available else None
        return None if found is None else Reading(self.clock(), found[1])

    def span(self, start: Reading | None, end: Reading | None) -> float | None:
        if start is None or end is None or end.at - start.at < MIN_SPAN_S:
            return None
        return min(max((end.stalled_s - start.stalled_s) / (end.at - start.at), 0.0), 1.0)

    def now(self) -> float | None:
        """The last 10 seconds' pressure (a fraction), or None."""
        found = _read_some(self.path) if self.available else None
        return None if found is None else found[0]

    def wait_quiet(self, limit_s: float, sleep: Callable[[float], None] = time.sleep) -> float:
        """Wait (up to `limit_s`) until the box's pressure is below QUIET_AVG10; the seconds waited."""
        started = self.clock()
        while limit_s > 0 and self.clock() - started < limit_s:
            pressure = self.now()
            if pressure is None or pressure < QUIET_AVG10:
                break
            sleep(min(2.0, max(limit_s - (self.clock() - started), 0.0)))
        return self.clock() - started
