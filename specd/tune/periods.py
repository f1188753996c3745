"""The times of day the tuner and the pins speak of: night, morning, afternoon, evening.

Their own small module so that what only names a period (`specd pin --period`, `specd status`'s
pins row, every command's option parsing) need not load the workload machinery.
"""

from __future__ import annotations

import time
from typing import Literal

Period = Literal["night", "morning", "afternoon", "evening"]
PERIODS: tuple[tuple[Period, int, int], ...] = (("night", 0, 6), ("morning", 6, 12), ("afternoon", 12, 18),
                                                ("evening", 18, 24))


def period_of(ts: float) -> Period:
    """The local time of day a unix time falls in."""
    hour = time.localtime(ts).tm_hour
    return next(p for p, lo, hi in PERIODS if lo <= hour < hi)
