"""Writing what the proxy observes without making any request wait for a disk.

The proxy's event loop hands each item over with `submit`, a deque append: it never blocks, never
raises and wakes no thread (a wake-up per request costs the event loop a GIL hand-off). One
thread per writer polls every `interval_s` and writes what is pending in batches. `close` writes
whatever is still pending before it returns, so a clean shutdown loses nothing; an item submitted
past `max_pending` (the disk cannot keep up) is dropped and counted instead of growing memory.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

Item = TypeVar("Item")
BATCH = 500


class OffPathWriter(Generic[Item]):
    """Subclasses say how to write a batch (`_write_batch`), in the writer thread."""

    def __init__(self, name: str, *, max_pending: int = 100_000, interval_s: float = 0.5) -> None:
        self._pending: collections.deque[Item] = collections.deque()
        self._max_pending, self._interval_s = max_pending, interval_s
        self._stop = threading.Event()
        self.submitted = self.dropped = self.written = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def submit(self, item: Item) -> None:
        self.submitted += 1
        if len(self._pending) >= self._max_pending:
            self.dropped += 1
            return
        self._pending.append(item)

    def flush(self, timeout_s: float = 10.0) -> None:
        """Wait until everything submitted so far is written (or dropped)."""
        deadline = time.monotonic() + timeout_s
        while self.written + self.dropped < self.submitted and time.monotonic() < deadline:
            time.sleep(0.01)

    def close(self, timeout_s: float = 10.0) -> None:
        """Write what is pending, then stop the thread."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    # ---- in the writer thread -------------------------------------------------------------------

    def _open(self) -> None:
        """Set up what the writer thread needs (a SQLite connection belongs to one thread)."""

    def _write_batch(self, batch: list[Item]) -> int:
        """Write `batch`; return how many were kept (the rest count as dropped)."""
        raise NotImplementedError

    def _close(self) -> None:
        """Release what `_open` set up."""

    def _run(self) -> None:
        self._open()
        try:
            while True:
                stopping = self._stop.wait(self._interval_s)
                while self._pending:
                    batch = [self._pending.popleft() for _ in range(min(BATCH, len(self._pending)))]
                    try:
                        kept = self._write_batch(batch)
                    except Exception:  # a full disk, a locked DB: lose this batch, not the thread
                        kept = 0
                        log.warning("%s: could not write %d items", self._thread.name, len(batch), exc_info=True)
                    self.written += kept
                    self.dropped += len(batch) - kept
                if stopping:
                    return
        finally:
            self._close()
