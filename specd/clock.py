"""The clock seam: wall time for records and schedules, monotonic time for durations and deadlines.

Code that waits, measures or stamps takes a `Clock` (the composition root passes `SYSTEM_CLOCK`);
tests pass a clock they step by hand, so timeouts and grace periods are tested without sleeping.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def time(self) -> float:
        """Seconds since the epoch (wall clock): timestamps people read."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never steps back: durations and deadlines."""
        ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


SYSTEM_CLOCK: Clock = SystemClock()


def utc_now(clock: Clock) -> datetime:
    return datetime.fromtimestamp(clock.time(), UTC)
