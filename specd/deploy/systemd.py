"""The only module that talks to systemd (over D-Bus, with pydbus).

pydbus has had no release since 2016, so it stays behind the small `SystemdClient` protocol:
another D-Bus library could replace it in this one file.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from specd.engines.journal import READ_LINES, condense
from specd.errors import SystemdError
from specd.paths import StateDir

_POLL_S = 0.05


@dataclass(frozen=True)
class UnitState:
    name: str
    load_state: str
    active_state: str
    sub_state: str
    result: str
    main_pid: int
    n_restarts: int
    exec_main_status: int
    fragment_path: str

    @property
    def running(self) -> bool:
        return self.active_state == "active" and self.main_pid > 0

    def describe(self) -> str:
        text = f"{self.active_state} ({self.sub_state})"
        if self.result not in ("", "success"):
            text += f", result {self.result}"
        if self.exec_main_status:
            text += f", exit status {self.exec_main_status}"
        return text


class SystemdClient(Protocol):
    scope: str

    def reload(self) -> None: ...
    def restart(self, unit: str, *, timeout_s: float = 90.0) -> UnitState: ...
    def stop(self, unit: str, *, timeout_s: float = 90.0) -> UnitState: ...
    def reset_failed(self, unit: str) -> None: ...
    def kill(self, unit: str, signum: int) -> None: ...
    def unit_state(self, unit: str) -> UnitState: ...
    def exec_start_argv(self, unit: str) -> list[list[str]]: ...
    def is_enabled(self, unit: str) -> bool: ...
    def set_enabled(self, unit: str, enabled: bool) -> None: ...


def _bus_error_text(exc: Exception) -> str:
    message = getattr(exc, "message", None) or str(exc)
    return message.split(": ", 1)[-1] if message.startswith("GDBus.Error") else message


class PydbusSystemd:
    """systemd's manager on the user or system bus."""

    def __init__(self, scope: str) -> None:
        self.scope = scope
        try:
            import pydbus
            from gi.repository import GLib
        except ImportError as exc:
            raise SystemdError(
                f"cannot import the D-Bus bindings ({exc})",
                hint="install PyGObject (apt-get install libgirepository1.0-dev libcairo2-dev pkg-config; "
                "pip install 'PyGObject<3.51') — install.sh does this",
            ) from exc
        self._glib_error: type[Exception] = GLib.Error
        self._pydbus = pydbus
        self._connect()

    def _connect(self) -> None:
        try:
            if self.scope == "system":
                self._bus = self._pydbus.SystemBus()
            else:
                address = os.environ.get("DBUS_SESSION_BUS_ADDRESS")
                runtime = os.environ.get("XDG_RUNTIME_DIR")
                if not address and runtime:
                    address = f"unix:path={runtime}/bus"
                if not address:
                    raise SystemdError("no user bus: neither DBUS_SESSION_BUS_ADDRESS nor XDG_RUNTIME_DIR is set",
                                       hint=_no_bus_hint())
                self._bus = self._pydbus.connect(address)
            self._manager: Any = self._bus.get(".systemd1")
        except self._glib_error as exc:
            raise SystemdError(
                f"cannot reach systemd's {self.scope} manager over D-Bus: {_bus_error_text(exc)}"
            ) from exc

    def _call(self, what: str, method: str, *args: Any) -> Any:
        """Call a manager method; when the bus connection was lost (bus daemon restarted), reconnect once."""
        try:
            return getattr(self._manager, method)(*args)
        except self._glib_error as exc:
            if "connection is closed" not in str(exc).lower():
                raise SystemdError(f"systemd refused to {what}: {_bus_error_text(exc)}") from exc
        self._connect()
        try:
            return getattr(self._manager, method)(*args)
        except self._glib_error as exc:
            raise SystemdError(f"systemd refused to {what}: {_bus_error_text(exc)}") from exc

    def reload(self) -> None:
        self._call("reload its units", "Reload")

    def reset_failed(self, unit: str) -> None:
        try:
            self._call(f"reset {unit}", "ResetFailedUnit", unit)
        except SystemdError:
            return  # not failed or not loaded: nothing to reset

    def kill(self, unit: str, signum: int) -> None:
        """Send `signum` to every process of the unit (a hung server gets SIGKILL, not a stop timeout)."""
        self._call(f"kill {unit}", "KillUnit", unit, "all", signum)

    def _wait_job(self, job_path: str, deadline: float) -> None:
        while time.monotonic() < deadline:
            jobs = self._call("list jobs", "ListJobs")
            if not any(job[4] == job_path for job in jobs):
                return
            time.sleep(_POLL_S)
        raise SystemdError(f"systemd job {job_path} did not finish in time")

    def restart(self, unit: str, *, timeout_s: float = 90.0) -> UnitState:
        job = self._call(f"restart {unit}", "RestartUnit", unit, "replace")
        self._wait_job(job, time.monotonic() + timeout_s)
        return self.unit_state(unit)

    def stop(self, unit: str, *, timeout_s: float = 90.0) -> UnitState:
        state = self.unit_state(unit)
        if state.load_state == "not-found" and state.active_state == "inactive":
            return state
        job = self._call(f"stop {unit}", "StopUnit", unit, "replace")
        self._wait_job(job, time.monotonic() + timeout_s)
        return self.unit_state(unit)

    def _unit(self, unit: str) -> Any:
        path = self._call(f"load {unit}", "LoadUnit", unit)
        try:
            return self._bus.get(".systemd1", path)
        except self._glib_error as exc:
            raise SystemdError(f"cannot read {unit}: {_bus_error_text(exc)}") from exc

    def unit_state(self, unit: str) -> UnitState:
        obj = self._unit(unit)
        try:
            service = obj["org.freedesktop.systemd1.Service"]
            return UnitState(
                name=unit,
                load_state=str(obj.LoadState),
                active_state=str(obj.ActiveState),
                sub_state=str(obj.SubState),
                result=str(service.Result),
                main_pid=int(service.MainPID),
                n_restarts=int(service.NRestarts),
                exec_main_status=int(service.ExecMainStatus),
                fragment_path=str(obj.FragmentPath),
            )
        except (KeyError, self._glib_error) as exc:
            raise SystemdError(f"cannot read the state of {unit}: {exc}") from exc

    def exec_start_argv(self, unit: str) -> list[list[str]]:
        service = self._unit(unit)["org.freedesktop.systemd1.Service"]
        return [list(entry[1]) for entry in service.ExecStart]

    def is_enabled(self, unit: str) -> bool:
        """Started at boot: `systemctl is-enabled` says enabled (a missing or static unit is not)."""
        try:
            state = str(self._call(f"read whether {unit} is enabled", "GetUnitFileState", unit))
        except SystemdError:
            return False
        return state in ("enabled", "enabled-runtime")

    def set_enabled(self, unit: str, enabled: bool) -> None:
        """`systemctl enable|disable UNIT` (the [Install] section's links), then a reload."""
        if enabled:
            self._call(f"enable {unit}", "EnableUnitFiles", [unit], False, True)
        else:
            self._call(f"disable {unit}", "DisableUnitFiles", [unit], False)
        self.reload()


def connect_systemd(scope: str) -> SystemdClient:
    return PydbusSystemd(scope)


JOURNAL_SOCKET = Path("/run/systemd/journal/socket")


def journal_tail(unit: str, scope: str, lines: int = 15, *, journal_socket: Path = JOURNAL_SOCKET) -> str:
    """The unit's last log lines, or a note saying why there are none."""
    if not journal_socket.exists():
        return ("(no systemd-journald runs on this box, so llama-server's output was not kept: run its "
                "ExecStart= by hand to see why it fails)")
    command = ["journalctl", "--no-pager", "-o", "cat", "-n", str(max(lines, READ_LINES)), "-u", unit]
    if scope == "user":
        command.insert(1, "--user")
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"(no journal: {exc})"
    text = result.stdout.strip()
    if not text or text.startswith("-- No entries --"):
        return "(the journal has no lines for this unit)"
    return condense(text, keep=lines)  # vLLM's cause sits far above its last lines (specd.engines.journal)


def _no_bus_hint() -> str:
    """Where the user bus is: `specd quickstart`'s private manager when one runs here, else a login session."""
    env_file = StateDir.from_environment().quickstart_manager / "env.sh"
    if env_file.is_file():
        return (f"`specd quickstart` left a private systemd --user running: `source {env_file}` in this shell, "
                "then run specd again (`specd quickstart --stop` ends it)")
    return "run specd inside a login session, or use `loginctl enable-linger $USER`"
