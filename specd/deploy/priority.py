"""CPU priority of a server that loads beside the live one.

A blue-green switch starts the new server while the old one serves. Loading the model and
answering the health gate take CPU, and on a small box (two cores: the live server's thread, the
proxy and the clients) that time comes out of the live server's tokens: measured on this project's
2-core VM, the switch's requests waited up to ~50 ms longer than without a switch
(`benchmarks/results/switch-wait.md`). So the new server runs `LOADING_NICE_STEP` nice steps lower
while it loads and is gated, and goes back to the priority it started with before the proxy sends
it a request: it serves exactly as a restart would have started it.

Linux keeps a nice value per thread: every thread of the server's processes is changed, and threads
it starts later inherit the lowered value from the thread that starts them. Raising a priority back
(a lower nice value) needs root, CAP_SYS_NICE or the process's RLIMIT_NICE; when none allows it the
server is left alone (a server stuck at low priority after the flip would be worse than the wait).
"""

from __future__ import annotations

import contextlib
import os
import resource
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import psutil

LOADING_NICE_STEP = 10
MAX_NICE = 19
CAP_SYS_NICE = 23  # linux/capability.h


@dataclass(frozen=True)
class Lowered:
    """A server whose threads run at `loading_nice` until `restore` gives them `nice` back."""

    pid: int
    nice: int
    loading_nice: int


class ProcessPriority(Protocol):
    def lower(self, pid: int) -> Lowered | str:
        """Lower the priority of `pid` (and its children) while it loads; a Lowered to restore later,
        or why it was left alone (nothing changed)."""
        ...

    def restore(self, lowered: Lowered) -> str | None:
        """Give the threads their priority back; None when done, else what went wrong."""
        ...


class UnchangedPriority:
    """Leaves every process as it is (the seams' default: tests over fake PIDs, read-only callers)."""

    def lower(self, pid: int) -> Lowered | str:
        return "process priority is not managed here"

    def restore(self, lowered: Lowered) -> str | None:
        return None


def has_cap_sys_nice(status: Path = Path("/proc/self/status")) -> bool:
    with contextlib.suppress(OSError, ValueError):
        for line in status.read_text().splitlines():
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> CAP_SYS_NICE & 1)
    return False


def may_raise_to(nice: int, rlimit_nice_soft: int, *, root: bool, cap_sys_nice: bool) -> bool:
    """setpriority(2)'s rule for lowering a nice value to `nice`: privilege, or RLIMIT_NICE >= 20 - nice."""
    return root or cap_sys_nice or rlimit_nice_soft >= 20 - nice


def _threads(pid: int) -> list[int]:
    """Every thread id of `pid` and of its children (a wrapper's server is its child)."""
    process = psutil.Process(pid)
    tids: list[int] = []
    for member in (process, *process.children(recursive=True)):
        with contextlib.suppress(psutil.NoSuchProcess):
            tids.extend(thread.id for thread in member.threads())
    return tids


def _set_nice(pid: int, nice: int) -> None:
    """Every thread, again until no new one appeared: a thread started meanwhile by one not yet
    changed would keep the old value."""
    done: set[int] = set()
    for _ in range(3):
        fresh = [tid for tid in _threads(pid) if tid not in done]
        if not fresh:
            return
        for tid in fresh:
            with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
                os.setpriority(os.PRIO_PROCESS, tid, nice)
        done.update(fresh)


class ThreadNice:
    """The real one: setpriority(2) on every thread, through psutil's view of the process tree."""

    def __init__(self, step: int = LOADING_NICE_STEP) -> None:
        self.step = step

    def lower(self, pid: int) -> Lowered | str:
        try:
            process = psutil.Process(pid)
            nice = process.nice()
            soft, _hard = process.rlimit(psutil.RLIMIT_NICE)
        except (psutil.Error, OSError) as exc:
            return f"cannot read the priority of PID {pid}: {exc}"
        if not may_raise_to(nice, soft if soft != resource.RLIM_INFINITY else 40,
                            root=os.geteuid() == 0, cap_sys_nice=has_cap_sys_nice()):
            return ("it loads at full priority: giving it back after the gate would need root, "
                    "CAP_SYS_NICE or LimitNICE= in its unit")
        loading_nice = min(MAX_NICE, nice + self.step)
        if loading_nice == nice:
            return f"it runs at nice {nice} already"
        try:
            _set_nice(pid, loading_nice)
        except (psutil.Error, OSError) as exc:
            with contextlib.suppress(psutil.Error, OSError):
                _set_nice(pid, nice)
            return f"cannot lower the priority of PID {pid}: {exc}"
        return Lowered(pid, nice, loading_nice)

    def restore(self, lowered: Lowered) -> str | None:
        try:
            _set_nice(lowered.pid, lowered.nice)
        except psutil.NoSuchProcess:
            return f"PID {lowered.pid} is gone"
        except (psutil.Error, OSError) as exc:
            return f"cannot give PID {lowered.pid} its priority back: {exc}"
        return None
