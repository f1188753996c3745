"""A loading server's CPU priority, for real: setpriority(2) on every thread of a real child process
(Python with threads of its own, standing for llama-server's), the lowered value inherited by a
thread it starts later, and every thread given its priority back. And the rule for when raising a
priority back is allowed, which decides whether a switch lowers it at all."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from specd.deploy.priority import LOADING_NICE_STEP, Lowered, ThreadNice, has_cap_sys_nice, may_raise_to

# Two threads now; one more for every line read (its native id printed), as a server starts its
# pool threads while it loads.
CHILD = """
import sys, threading, time
def idle(): time.sleep(600)
def spawn():
    started = threading.Event()
    def run(): started.set(); idle()
    threading.Thread(target=run, daemon=True).start(); started.wait()
for _ in range(2): spawn()
print("ready", flush=True)
for _ in sys.stdin:
    spawn(); print(sorted(t.native_id for t in threading.enumerate())[-1], flush=True)
"""


@pytest.fixture
def server() -> Iterator[subprocess.Popen[str]]:
    with subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True) as child:  # closes its pipes on the way out
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        yield child
        child.kill()


def thread_nices(pid: int) -> dict[int, int]:
    return {thread.id: os.getpriority(os.PRIO_PROCESS, thread.id) for thread in psutil.Process(pid).threads()}


def start_thread(child: subprocess.Popen[str]) -> None:
    assert child.stdin is not None and child.stdout is not None
    child.stdin.write("\n")
    child.stdin.flush()
    child.stdout.readline()


def test_every_thread_loads_lowered_and_gets_its_priority_back(server: subprocess.Popen[str]) -> None:
    before = thread_nices(server.pid)
    assert len(before) >= 3 and set(before.values()) == {os.getpriority(os.PRIO_PROCESS, 0)}
    priority = ThreadNice()
    lowered = priority.lower(server.pid)
    if os.geteuid() != 0:  # CI and this project's machines run the suite as root; a user sees the refusal
        assert isinstance(lowered, str) and "CAP_SYS_NICE" in lowered
        assert thread_nices(server.pid) == before  # refused: nothing was changed
        return
    assert isinstance(lowered, Lowered) and lowered.pid == server.pid
    nice = next(iter(before.values()))
    assert lowered.loading_nice == min(19, nice + LOADING_NICE_STEP)
    assert set(thread_nices(server.pid).values()) == {lowered.loading_nice}
    assert set(thread_nices(os.getpid()).values()) == {nice}  # the server's parent (this test) is left alone
    start_thread(server)  # a thread the server starts while it loads inherits the lowered value
    during = thread_nices(server.pid)
    assert len(during) == len(before) + 1 and set(during.values()) == {lowered.loading_nice}
    assert priority.restore(lowered) is None
    assert set(thread_nices(server.pid).values()) == {nice}


def test_a_server_two_launchers_below_the_units_main_process_is_lowered_too() -> None:
    """ExecStart= names a wrapper that runs a shell that runs the server: the server is a grandchild of
    the unit's MainPID, and its threads are the ones that load."""
    launcher = f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {CHILD!r}])"
    wrapper = f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {launcher!r}])"
    with subprocess.Popen([sys.executable, "-c", wrapper], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True) as main:
        try:
            assert main.stdout is not None and main.stdout.readline().strip() == "ready"
            [server] = [p for p in psutil.Process(main.pid).children(recursive=True) if not p.children()]
            assert server.ppid() != main.pid  # two levels below
            nice = os.getpriority(os.PRIO_PROCESS, 0)
            lowered = ThreadNice().lower(main.pid)
            if os.geteuid() != 0:  # as in the test above: a user without the privilege sees the refusal
                assert isinstance(lowered, str) and set(thread_nices(server.pid).values()) == {nice}
                return
            assert isinstance(lowered, Lowered)
            assert set(thread_nices(server.pid).values()) == {lowered.loading_nice}
            assert ThreadNice().restore(lowered) is None
            assert set(thread_nices(server.pid).values()) == {nice}
        finally:
            for process in (*psutil.Process(main.pid).children(recursive=True), psutil.Process(main.pid)):
                process.kill()


def test_a_server_gone_before_its_priority_is_given_back_is_reported(server: subprocess.Popen[str]) -> None:
    server.kill()
    server.wait()
    assert ThreadNice().restore(Lowered(server.pid, 0, 10)) == f"PID {server.pid} is gone"
    assert "cannot read the priority" in str(ThreadNice().lower(server.pid))


@pytest.mark.parametrize(("nice", "rlimit", "root", "cap", "allowed"), [
    (0, 0, False, False, False),  # an ordinary user: a nice value once raised stays raised
    (0, 20, False, False, True),  # LimitNICE=20 (or RLIMIT_NICE 20): back to 0 is allowed
    (5, 15, False, False, True),  # back to 5 needs 20 - 5
    (0, 19, False, False, False),
    (0, 0, True, False, True),  # root
    (0, 0, False, True, True),  # CAP_SYS_NICE
])
def test_raising_a_priority_back_needs_privilege_or_rlimit_nice(nice: int, rlimit: int, root: bool, cap: bool,
                                                               allowed: bool) -> None:
    assert may_raise_to(nice, rlimit, root=root, cap_sys_nice=cap) is allowed


@pytest.mark.parametrize(("capeff", "has"), [
    ("000001ffffffffff", True),   # root's full set
    ("0000000000800000", True),   # CAP_SYS_NICE (bit 23) alone
    ("0000000000400000", False),  # bit 22 (CAP_SYS_PACCT) alone
    ("0000000001000000", False),  # bit 24 (CAP_SYS_RESOURCE) alone
    ("0000000000000000", False),  # an ordinary user
])
def test_cap_sys_nice_is_read_from_the_effective_capability_set(tmp_path: Path, capeff: str, has: bool) -> None:
    status = tmp_path / "status"
    status.write_text(f"Name:\tspecd\nCapInh:\t0000000000000000\nCapPrm:\t000001ffffffffff\nCapEff:\t{capeff}\n"
                      "CapBnd:\t000001ffffffffff\n")
    assert has_cap_sys_nice(status) is has


@pytest.mark.parametrize("text", ["Name:\tspecd\n", "CapEff:\tnot-hex\n", None])
def test_a_status_file_without_a_readable_capeff_line_means_no_privilege(tmp_path: Path, text: str | None) -> None:
    status = tmp_path / "status"
    if text is not None:
        status.write_text(text)
    assert has_cap_sys_nice(status) is False
