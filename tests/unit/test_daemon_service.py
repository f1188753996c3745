"""The daemon's service side without a service manager: sd_notify datagrams and the status file
that tells a live daemon from a dead one (pure enough for the unit tier: a socket in tmp, a file)."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import pytest

from specd.daemon.control import daemon_status
from specd.daemon.service import notify
from specd.paths import StateDir


def test_sd_notify_sends_datagrams_to_the_notify_socket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    address = str(tmp_path / "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind(address)
        monkeypatch.setenv("NOTIFY_SOCKET", address)
        assert notify("READY=1\nSTATUS=guarding") is True
        assert listener.recv(4096) == b"READY=1\nSTATUS=guarding"
    monkeypatch.delenv("NOTIFY_SOCKET")
    assert notify("READY=1") is False


def test_daemon_status_tells_a_live_daemon_from_a_dead_one(tmp_path: Path) -> None:
    assert daemon_status(StateDir(tmp_path / "specd"))["running"] is False  # never ran
    path = tmp_path / "specd" / "daemon.json"
    path.parent.mkdir(parents=True)
    health = {"healthy": True, "detail": "healthy"}
    record = {"running": True, "pid": os.getpid(), "heartbeat_at": time.time(), "next_tuning": "2026-01-01T03:30",
              "units": {"u.service": {"health": health}}}
    path.write_text(json.dumps(record))
    status = daemon_status(StateDir(tmp_path / "specd"))
    assert status["running"] is True and status["last_health"] == health
    assert status["next_tuning"] == "2026-01-01T03:30"
    path.write_text(json.dumps({**record, "heartbeat_at": time.time() - 600}))  # killed -9: no heartbeat
    assert daemon_status(StateDir(tmp_path / "specd"))["running"] is False
