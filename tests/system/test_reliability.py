"""Faults a real box meets: a process kill mid-write, a full disk, a broken state DB, systemd's start
limit, the bus daemon dying mid-switch, a failing daemon-reload."""

from __future__ import annotations

import errno
import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specd.context import seams_for
from specd.deploy.switch import WRITE_STEPS, Switcher
from specd.deploy.systemd import PydbusSystemd
from specd.deploy.unitfiles import atomic_write
from specd.errors import PreflightError, SwitchFailed, SystemdError
from specd.setup.sandbox import start_private_systemd
from specd.unit.render import profile_of_unit
from tests.conftest import alias_answers
from tests.system.small_disk import small_tmpfs

pytestmark = [pytest.mark.systemd, pytest.mark.llama, pytest.mark.usefixtures("real_server")]


@pytest.mark.parametrize("step", WRITE_STEPS)
def test_a_kill_while_writing_leaves_old_or_new_in_full(box, step: str) -> None:
    """A process kill (SIGKILL) inside an atomic write; a power cut would also lose unsynced pages,
    which this does not exercise."""
    box.specd("switch", "autoregressive", check=True)
    old = box.unit_path.read_text()
    new = json.loads(box.specd("show", "ngram-simple", "--json", check=True).stdout)["unit"]
    killed = box.specd("switch", "ngram-simple", env={"SPECD_FAULT": step})
    assert killed.returncode == -signal.SIGKILL
    text = box.unit_path.read_text()
    assert text in (old, new)  # one or the other in full, never a torn or mixed file
    if step.startswith("unit-before-dirsync"):
        assert any(p.read_text() == old for p in box.unit_path.parent.glob(f"{box.unit}.pre-*"))
    assert box.specd("status").returncode == 3  # read-only: reports the interrupted switch
    assert box.unit_path.read_text() == text
    box.specd("recover", check=True)
    assert box.unit_path.read_text() == old
    assert not list(box.unit_path.parent.glob(".*specd-tmp-*"))  # the unit's and its backups' temp files
    assert alias_answers(box.port)


def test_enospc_while_writing_keeps_the_old_file(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "small", "16k") as small:
        target = small / "unit.service"
        atomic_write(target, b"old\n")
        with pytest.raises(PreflightError, match="no space left"):
            atomic_write(target, b"x" * 64 * 1024)
        assert target.read_text() == "old\n"
        assert [p.name for p in small.iterdir()] == ["unit.service"]


def test_corrupt_state_db_is_a_clear_error_and_rollback_uses_backups(box) -> None:
    box.specd("switch", "autoregressive", check=True)
    box.specd("switch", "ngram-simple", check=True)
    db = box.root / "state" / "specd" / "specd.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    db.write_bytes(b"this is not a database" * 100)
    before = box.unit_path.read_text()
    switched = box.specd("switch", "ngram-mod")
    assert switched.returncode == 1 and "state database" in switched.stderr and "Traceback" not in switched.stderr
    assert box.unit_path.read_text() == before
    rolled = box.specd("rollback")
    assert rolled.returncode == 0, rolled.stderr
    assert "from the .pre-* backups alone" in rolled.stderr
    assert profile_of_unit(box.unit_path.read_text()) == "autoregressive" and alias_answers(box.port)


def test_locked_state_db_fails_cleanly_and_changes_nothing(box) -> None:
    box.specd("switch", "autoregressive", check=True)
    before = box.unit_path.read_text()
    holder = sqlite3.connect(box.root / "state" / "specd" / "specd.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        result = box.specd("switch", "ngram-simple", env={"SPECD_DB_TIMEOUT_S": "1"})
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert result.returncode == 1 and "locked" in result.stderr and "Traceback" not in result.stderr
    assert box.unit_path.read_text() == before


def test_unit_failed_by_start_limit_is_reset_and_switched(box) -> None:
    runs = box.root / "runs"
    original = ("[Unit]\nStartLimitIntervalSec=60\nStartLimitBurst=1\n[Service]\n"
                f"ExecStart=/bin/sh -c 'echo ran >> {runs}; exit 1'\n")
    box.unit_path.parent.mkdir(parents=True, exist_ok=True)
    box.unit_path.write_text(original)
    env = box.env
    subprocess.run(["systemctl", "--user", "daemon-reload"], env=env, check=True)
    starts = [subprocess.run(["systemctl", "--user", "start", "--wait", box.unit], env=env, capture_output=True,
                             timeout=60, check=False) for _ in range(2)]
    assert [s.returncode != 0 for s in starts] == [True, True]
    # The second start was refused by the start limit: the program ran once. (systemd 252 keeps
    # Result=exit-code from the first failure; the refusal shows in what ran, not in Result.)
    assert runs.read_text() == "ran\n"
    state = subprocess.run(["systemctl", "--user", "show", box.unit, "-p", "ActiveState", "--value"], env=env,
                           capture_output=True, text=True, check=True).stdout.strip()
    assert state == "failed"
    result = box.specd("switch", "autoregressive")
    assert result.returncode == 0, result.stderr
    assert alias_answers(box.port)
    assert [p.read_text() for p in box.unit_path.parent.glob(f"{box.unit}.pre-*")] == [original]


def test_bus_daemon_killed_mid_switch_is_survived(box, systemd_manager) -> None:
    box.specd("switch", "autoregressive", check=True)
    box.edit_profile("base", stability_s=5)
    switch = subprocess.Popen([sys.executable, "-m", "specd", "switch", "ngram-simple"], env=box.env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    intent = Path(box.env["XDG_STATE_HOME"]) / "specd" / "intents" / f"{box.unit}.json"

    def step() -> str | None:
        try:
            return str(json.loads(intent.read_text())["step"])
        except (OSError, ValueError):  # not written yet, or caught between write and rename
            return None

    deadline = time.monotonic() + 60
    while step() != "restart":  # the new server is started; specd is health-gating it over D-Bus
        assert time.monotonic() < deadline and switch.poll() is None, "the switch never reached its health gate"
        time.sleep(0.05)
    bus_pid = subprocess.run(["systemctl", "--user", "show", "dbus.service", "-p", "MainPID", "--value"],
                             env=systemd_manager.env, capture_output=True, text=True, check=True).stdout.strip()
    assert int(bus_pid) > 0
    subprocess.run(["kill", "-9", bus_pid], check=True)
    _out, err = switch.communicate(timeout=120)
    assert switch.returncode == 0, err
    assert profile_of_unit(box.unit_path.read_text()) == "ngram-simple" and alias_answers(box.port)


class FailingReloadSystemd(PydbusSystemd):
    """FAKE fault: systemd's daemon-reload fails once (a real manager cannot be made to on demand)."""

    failures_left = 1

    def reload(self) -> None:
        if self.failures_left:
            self.failures_left -= 1
            raise SystemdError("systemd refused to reload its units: injected failure")
        super().reload()


def test_failing_daemon_reload_reverts(box) -> None:
    box.specd("switch", "autoregressive", check=True)
    before = box.unit_path.read_text()
    systemd = FailingReloadSystemd("user")
    old_pid = systemd.unit_state(box.unit).main_pid
    switcher = Switcher(seams_for(box.deployment, systemd=systemd))
    with pytest.raises(SwitchFailed) as failure:
        switcher.switch("ngram-simple")
    # The reload failed before any restart: the old unit goes back and its server simply keeps running.
    assert "injected failure" in str(failure.value) and "kept running" in str(failure.value)
    assert box.unit_path.read_text() == before and alias_answers(box.port)
    assert systemd.unit_state(box.unit).main_pid == old_pid
    history = json.loads(box.specd("history", "--json", check=True).stdout)
    assert history[0]["outcome"] == "reverted"


def test_full_disk_refuses_the_switch_before_touching_the_unit(tmp_path: Path, box) -> None:
    root = tmp_path / "fulldisk"
    unit_link = root / "home" / ".config" / "systemd" / "user"
    unit_link.parent.mkdir(parents=True)
    with small_tmpfs(tmp_path / "tmpfs", "32k") as unit_dir:
        unit_link.symlink_to(unit_dir)  # the manager's unit directory is the small tmpfs
        manager = start_private_systemd(root)
        try:
            env = {**manager.env, "XDG_STATE_HOME": str(root / "state"), "SPECD_CONFIG": str(root / "specd.toml")}
            (root / "specd.toml").write_text(
                f'unit = "{box.unit}"\nscope = "user"\nprofiles_dir = "{box.profiles_dir}"\n')

            def specd(*args: str) -> subprocess.CompletedProcess[str]:
                return subprocess.run([sys.executable, "-m", "specd", *args], env=env, capture_output=True,
                                      text=True, timeout=120, check=False)

            first = specd("switch", "autoregressive")
            assert first.returncode == 0, first.stderr
            unit = unit_dir / box.unit
            before = unit.read_text()
            filler = unit_dir / "filler"
            with pytest.raises(OSError) as full, filler.open("wb", buffering=0) as out:
                while True:
                    out.write(b"\0" * 1024)
            assert full.value.errno == errno.ENOSPC
            refused = specd("switch", "ngram-simple")
            assert refused.returncode == 1 and "not enough free disk space" in refused.stderr, refused.stderr
            assert "nothing was changed" in refused.stderr
            assert unit.read_text() == before
            assert sorted(p.name for p in unit_dir.iterdir()) == sorted([box.unit, "filler"])
            assert alias_answers(box.port)
            filler.unlink()
            again = specd("switch", "ngram-simple")
            assert again.returncode == 0, again.stderr
            assert profile_of_unit(unit.read_text()) == "ngram-simple" and alias_answers(box.port)
        finally:
            manager.stop()
