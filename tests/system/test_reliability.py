"""Faults a real box meets: a process kill mid-write, a full disk, a broken state DB, systemd's start
limit, the bus daemon dying mid-switch, a failing daemon-reload."""

from __future__ import annotations

import json
import os
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

pytestmark = [pytest.mark.systemd, pytest.mark.llama, pytest.mark.usefixtures("real_server")]


@pytest.mark.parametrize("step", WRITE_STEPS)
def test_a_kill_while_writing_leaves_old_or_new_in_full(box, step: str) -> None:
    """A process kill (SIGKILL) inside an atomic write; a power cut would also lose unsynced pages,
    which this does not exercise."""
    box.specd("switch", "autoregressive", check=True)
    old = box.unit_path.read_text()
    killed = box.specd("switch", "ngram-simple", env={"SPECD_FAULT": step})
    assert killed.returncode == -signal.SIGKILL
    text = box.unit_path.read_text()
    assert profile_of_unit(text) in ("autoregressive", "ngram-simple")
    assert text == old or text.count("ExecStart=") == 1 and text.endswith("WantedBy=default.target\n")
    if step.startswith("unit-before-dirsync"):
        assert any(p.read_text() == old for p in box.unit_path.parent.glob(f"{box.unit}.pre-*"))
    assert box.specd("status").returncode == 3  # read-only: reports the interrupted switch
    assert box.unit_path.read_text() == text
    box.specd("recover", check=True)
    assert box.unit_path.read_text() == old
    assert not list(box.unit_path.parent.glob(".*specd-tmp-*"))  # the unit's and its backups' temp files
    assert alias_answers(box.port)


def _mount_tmpfs(path: Path, size: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True,
                             text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}")


def test_enospc_while_writing_keeps_the_old_file(tmp_path: Path) -> None:
    small = tmp_path / "small"
    _mount_tmpfs(small, "16k")
    try:
        target = small / "unit.service"
        atomic_write(target, b"old\n")
        with pytest.raises(PreflightError, match="no space left"):
            atomic_write(target, b"x" * 64 * 1024)
        assert target.read_text() == "old\n"
        assert [p.name for p in small.iterdir()] == ["unit.service"]
    finally:
        subprocess.run(["umount", str(small)], check=False)


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
    box.unit_path.parent.mkdir(parents=True, exist_ok=True)
    box.unit_path.write_text("[Unit]\nStartLimitIntervalSec=60\nStartLimitBurst=1\n[Service]\nExecStart=/bin/false\n")
    env = box.env
    subprocess.run(["systemctl", "--user", "daemon-reload"], env=env, check=True)
    for _ in range(3):
        subprocess.run(["systemctl", "--user", "start", box.unit], env=env, capture_output=True, check=False)
    shown = subprocess.run(["systemctl", "--user", "show", box.unit, "-p", "Result"], env=env, capture_output=True,
                           text=True, check=False).stdout
    assert "start-limit-hit" in shown or "exit-code" in shown
    result = box.specd("switch", "autoregressive")
    assert result.returncode == 0, result.stderr
    assert alias_answers(box.port)
    assert any(p.read_text().endswith("ExecStart=/bin/false\n") for p in box.unit_path.parent.glob(f"{box.unit}.pre-*"))


def test_bus_daemon_killed_mid_switch_is_survived(box, systemd_manager) -> None:
    box.specd("switch", "autoregressive", check=True)
    box.edit_profile("base", stability_s=5)
    switch = subprocess.Popen([sys.executable, "-m", "specd", "switch", "ngram-simple"], env=box.env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and "ngram-simple" not in box.unit_path.read_text():
        time.sleep(0.1)
    time.sleep(2.0)
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
    unit_dir = root / "home" / ".config" / "systemd" / "user"
    _mount_tmpfs(unit_dir, "32k")
    manager = start_private_systemd(root)
    try:
        env = {**manager.env, "XDG_STATE_HOME": str(root / "state"), "SPECD_CONFIG": str(root / "specd.toml")}
        (root / "specd.toml").write_text(f'unit = "{box.unit}"\nscope = "user"\nprofiles_dir = "{box.profiles_dir}"\n')

        def specd(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([sys.executable, "-m", "specd", *args], env=env, capture_output=True, text=True,
                                  timeout=120, check=False)

        assert specd("switch", "autoregressive").returncode == 0
        unit = unit_dir / box.unit
        before = unit.read_text()
        filler = unit_dir / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 1024):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
        refused = specd("switch", "ngram-simple")
        assert refused.returncode == 1 and "not enough free disk space" in refused.stderr, refused.stderr
        assert "nothing was changed" in refused.stderr
        assert unit.read_text() == before
        assert sorted(p.name for p in unit_dir.iterdir()) == sorted([box.unit, "filler"])
        assert alias_answers(box.port)
        filler.unlink()
        assert specd("switch", "ngram-simple").returncode == 0
    finally:
        manager.stop()
        subprocess.run(["umount", str(unit_dir)], check=False)
