"""Giving the memory of big request bodies back to the system once they are answered.

Python frees a body's buffer when its request ends, but glibc's malloc may keep the pages:
- by default its mmap threshold rises to the size of the biggest block freed (up to 32 MiB), so
  after one 30 MB body every later block below that size comes from the heap, where a freed hole
  below the top is never returned. `keep_big_blocks_apart` fixes the threshold at 1 MiB, which
  turns the rise off: a bigger block (a body's buffer past its first MiB) is its own mapping,
  unmapped when freed, while the 256 KiB pieces each socket read makes are reused from the heap
  instead of being mapped and faulted in afresh each time (at glibc's initial 128 KiB the daemon
  spent 1.1x to 1.9x the CPU on the same uploads; with glibc's rising threshold it passed 300 MB:
  benchmarks/results/hostile-bodies.md);
- memory freed in the heap and in the worker threads' arenas stays there until trimmed: after
  `Trimmer` has seen TRIM_AFTER_BYTES of bodies released it runs malloc_trim(0) on a thread,
  TRIM_DELAY_S later (one trim per burst, off the event loop).
Neither applies outside glibc (musl, macOS): each is then a no-op.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import functools
import logging

log = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3  # glibc's mallopt(3) parameter numbers
MMAP_THRESHOLD_BYTES = 1024 * 1024
TRIM_AFTER_BYTES = 16 * 1024 * 1024
TRIM_DELAY_S = 1.0


@functools.cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


def keep_big_blocks_apart() -> bool:
    """Every allocation over MMAP_THRESHOLD_BYTES gets its own mapping, returned to the system when
    freed (True when glibc took the setting)."""
    libc = _libc()
    return bool(libc is not None and libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))


def give_back_free_memory() -> bool:
    """malloc_trim(0): free pages in every arena go back to the system (True when some did)."""
    libc = _libc()
    return bool(libc is not None and libc.malloc_trim(0))


class Trimmer:
    """Counts released body bytes (`HeldBytes(on_release=...)`) and trims once per burst."""

    def __init__(self, after_bytes: int = TRIM_AFTER_BYTES, delay_s: float = TRIM_DELAY_S) -> None:
        self._after_bytes, self._delay_s = after_bytes, delay_s
        self._released = 0
        self._pending: asyncio.TimerHandle | None = None
        self.trims = 0

    def released(self, size: int) -> None:
        self._released += size
        if self._released >= self._after_bytes and self._pending is None and _libc() is not None:
            self._pending = asyncio.get_running_loop().call_later(self._delay_s, self._trim)

    def _trim(self) -> None:
        self._pending, self._released = None, 0
        self.trims += 1
        asyncio.get_running_loop().run_in_executor(None, give_back_free_memory)
