"""One mutating operation at a time per deployment, across CLI invocations and the daemon.

An flock on `<state>/locks/<unit>.lock`; the holder writes who it is into the file so a second
caller can name it. The kernel drops the lock when the holder dies, even on kill -9.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from specd.clock import SYSTEM_CLOCK, Clock
from specd.errors import LockBusy


def _holder(fd: int) -> str:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        info = json.loads(os.read(fd, 4096).decode() or "{}")
        return f"pid {info.get('pid')} ({info.get('what')}, since {info.get('since')})"
    except (OSError, ValueError):
        return "another specd process"


@contextmanager
def deployment_lock(path: Path, unit: str, what: str, *, timeout_s: float = 10.0,
                    clock: Clock = SYSTEM_CLOCK) -> Iterator[None]:
    """Hold `unit`'s lock file `path` for `what`; wait up to timeout_s, then raise LockBusy naming
    the holder."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = clock.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if clock.monotonic() >= deadline:
                    raise LockBusy(
                        f"{unit} is busy: {_holder(fd)} holds the specd lock",
                        hint="wait for it to finish, then try again",
                    ) from None
                clock.sleep(0.1)
        record = {"pid": os.getpid(), "what": what, "since": datetime.now(UTC).isoformat(timespec="seconds"),
                  "argv": sys.argv[:4]}
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, json.dumps(record).encode())
        yield
    finally:
        os.close(fd)
