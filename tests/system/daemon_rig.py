"""The specd daemon as a real Type=notify user unit on the private systemd, for the system tests
that need it (its proxy in front of the real llama-server). `start_daemon` is a fixture (conftest)."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from specd.setup.sandbox import free_port
from tests.conftest import REPO, Box
from tests.proxy_fakes import read_stream

_numbers = itertools.count(1)


def real_stack(test: Callable[..., None]) -> Callable[..., None]:
    """Needs the private systemd manager and the real llama-server with the tiny model."""
    marked: Callable[..., None] = pytest.mark.systemd(pytest.mark.llama(pytest.mark.usefixtures("real_server")(test)))
    return marked


@dataclass
class RunningDaemon:
    box: Box
    unit: str
    unit_path: Path
    log_path: Path
    proxy_port: int

    @property
    def proxy_url(self) -> str:
        return f"http://127.0.0.1:{self.proxy_port}"

    @property
    def state_dir(self) -> Path:
        return Path(self.box.env["XDG_STATE_HOME"]) / "specd"

    def systemctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["systemctl", "--user", *args], env=self.box.env, capture_output=True, text=True,
                              timeout=120, check=False)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:] if self.log_path.exists() else "(no log)"

    def status(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.state_dir / "daemon.json").read_text())
        return data

    def live_status(self, unit: str) -> dict[str, Any]:
        """The daemon's state for `unit` right now, from its control socket (daemon.json lags a heartbeat)."""
        transport = httpx.HTTPTransport(uds=str(self.state_dir / "daemon.sock"))
        with httpx.Client(transport=transport, timeout=5) as control:
            state: dict[str, Any] = control.get("http://specd/status").json()["units"][unit]
        return state

    def wait_for(self, what: str, condition: Callable[[], object], timeout_s: float = 90) -> Any:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = condition()
            if value:
                return value
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}\n--- daemon log ---\n{self.log()}")

    def main_pid(self, unit: str) -> int:
        out = self.systemctl("show", "-p", "MainPID", "--value", unit).stdout.strip()
        return int(out or 0)

    def proxy_state(self, unit: str) -> dict[str, Any]:
        """The proxy's state for `unit` as the daemon's control socket reports it (paused, active, ...)."""
        transport = httpx.HTTPTransport(uds=str(self.state_dir / "daemon.sock"))
        with httpx.Client(transport=transport, timeout=5) as control:
            state: dict[str, Any] = control.get("http://specd/status").json()["units"][unit]["proxy"]
        return state


def shipped_restart_policy() -> str:
    """`Restart=` and `RestartSec=` exactly as units/specd.service ships them (one definition)."""
    lines = (REPO / "units" / "specd.service").read_text().splitlines()
    return "".join(f"{line}\n" for line in lines if line.startswith(("Restart=", "RestartSec=")))


def write_config(box: Box, proxy_port: int, *, grace_s: float, daemon_extra: str = "",
                 tuner: str = "enabled = false\n", extra: str = "", capture: bool = False, proxy: str = "",
                 hold_s: float = 120) -> None:
    """`daemon_extra` adds lines to [daemon], `proxy` to [proxy], `tuner` replaces [tuner]'s body, `extra`
    appends tables."""
    box.config_path.write_text(
        f'unit = "{box.unit}"\nscope = "user"\nprofiles_dir = "{box.profiles_dir}"\nlock_timeout_s = 30\n\n'
        f'[proxy]\nlisten = "127.0.0.1:{proxy_port}"\nhold_timeout_s = {hold_s}\n'
        f'capture_bodies = {str(capture).lower()}\n{proxy}\n'
        f"[daemon]\nhealth_interval_s = 1\nfailures_before_restart = 2\nrollback_grace_s = {grace_s}\n"
        f"{daemon_extra}\n[tuner]\n{tuner}\n{extra}"
    )


@pytest.fixture
def start_daemon(box: Box) -> Iterator[Callable[..., RunningDaemon]]:
    started: list[RunningDaemon] = []

    def start(*, grace_s: float = 0.0, daemon_extra: str = "", tuner: str = "enabled = false\n",
              extra: str = "", restart_as_shipped: bool = False, capture: bool = False,
              proxy: str = "", hold_s: float = 120) -> RunningDaemon:
        proxy_port = free_port()
        write_config(box, proxy_port, grace_s=grace_s, daemon_extra=daemon_extra, tuner=tuner, extra=extra,
                     capture=capture, proxy=proxy, hold_s=hold_s)
        name = f"specd-daemon-{os.getpid()}-{next(_numbers)}.service"
        log_path = box.root / "daemon.log"
        environment = " ".join(
            f'"{key}={box.env[key]}"' for key in ("HOME", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "XDG_STATE_HOME",
                                                  "XDG_CACHE_HOME", "SPECD_CACHE", "SPECD_CONFIG",
                                                  "DBUS_SESSION_BUS_ADDRESS") if key in box.env
        )
        unit_path = box.manager.unit_dir / name
        unit_path.parent.mkdir(parents=True, exist_ok=True)
        unit_path.write_text(
            "[Service]\nType=notify\nNotifyAccess=main\nWatchdogSec=20\nTimeoutStopSec=40\n"
            + (shipped_restart_policy() if restart_as_shipped else "") +
            f"ExecStart={sys.executable} -m specd daemon\nWorkingDirectory={REPO}\n"
            f'Environment={environment} "PYTHONPATH={REPO}" PYTHONUNBUFFERED=1\n'
            f"StandardOutput=append:{log_path}\nStandardError=append:{log_path}\n"
        )
        daemon = RunningDaemon(box, name, unit_path, log_path, proxy_port)
        daemon.systemctl("daemon-reload")
        result = daemon.systemctl("start", name)  # Type=notify: returns once the daemon sent READY=1
        assert result.returncode == 0, f"{result.stderr}\n--- daemon log ---\n{daemon.log()}"
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        daemon.systemctl("stop", daemon.unit)
        daemon.unit_path.unlink(missing_ok=True)
        daemon.systemctl("daemon-reload")


def chat(stream: bool, tokens: int = 12) -> dict[str, Any]:
    return {"model": "tiny", "messages": [{"role": "user", "content": "Write a python function that adds numbers."}],
            "max_tokens": tokens, "temperature": 0, "stream": stream}




def switch_waiting_on_a_stream(box: Box, daemon: RunningDaemon, *, tokens: int = 1500
                               ) -> tuple[subprocess.Popen[str], threading.Thread]:
    """A long stream through the proxy, then `specd switch ngram-simple`, returned once it drains
    (the proxy is paused and the CLI waits for the stream)."""

    def stream() -> None:
        with httpx.Client(timeout=180) as client, contextlib.suppress(httpx.HTTPError, AssertionError):
            read_stream(client, f"{daemon.proxy_url}/v1/chat/completions", chat(True, tokens))

    reader = threading.Thread(target=stream, daemon=True)
    reader.start()
    daemon.wait_for("the stream to be in flight", lambda: daemon.proxy_state(box.unit)["active"] >= 1, 30)
    cli = subprocess.Popen([sys.executable, "-m", "specd", "switch", "ngram-simple"], env=box.env, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    daemon.wait_for("the switch to pause the proxy", lambda: daemon.proxy_state(box.unit)["paused"], 60)
    return cli, reader
