"""FAKE service manager and health gate for the slot tests: two units with their own state (a real
systemd cannot be told to fail one named call, or be killed at a fault point in milliseconds)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specd.deploy.health import HealthResult
from specd.deploy.systemd import UnitState
from specd.errors import HealthError


@dataclass
class FakeUnit:
    running: bool = False
    main_pid: int = 0
    enabled: bool = False
    loaded: str | None = None  # the unit file's text at the last daemon-reload (what a restart runs)
    started_from: str | None = None  # the loaded text the running server was started with


@dataclass
class FakeSlotsSystemd:
    """A scripted service manager with one state per unit; `fail` raises at a named call."""

    scope: str = "user"
    units: dict[str, FakeUnit] = field(default_factory=dict)
    calls: list[tuple[str, str]] = field(default_factory=list)
    fail: dict[tuple[str, str], BaseException] = field(default_factory=dict)
    next_pid: int = 100
    unit_files: dict[str, Path] = field(default_factory=dict)  # read at each reload, as systemd does
    without_main_pid: set[str] = field(default_factory=set)  # started, but systemd names no main PID (yet)

    def _call(self, name: str, unit: str = "") -> FakeUnit:
        self.calls.append((name, unit))
        failure = self.fail.pop((name, unit), None)
        if failure is not None:
            raise failure
        return self.units.setdefault(unit, FakeUnit())

    def reload(self) -> None:
        self._call("reload")
        for unit, path in self.unit_files.items():
            self.units.setdefault(unit, FakeUnit()).loaded = path.read_text() if path.exists() else None

    def restart(self, unit: str, *, timeout_s: float = 90.0) -> UnitState:
        state = self._call("restart", unit)
        self.next_pid += 1
        state.running, state.started_from = True, state.loaded
        state.main_pid = 0 if unit in self.without_main_pid else self.next_pid
        return self.unit_state(unit)

    def stop(self, unit: str, *, timeout_s: float = 90.0) -> UnitState:
        state = self._call("stop", unit)
        state.running, state.main_pid = False, 0
        return self.unit_state(unit)

    def reset_failed(self, unit: str) -> None:
        self.calls.append(("reset_failed", unit))

    def kill(self, unit: str, signum: int) -> None:
        self._call("kill", unit).running = False

    def unit_state(self, unit: str) -> UnitState:
        state = self.units.setdefault(unit, FakeUnit())
        return UnitState(unit, "loaded", "active" if state.running else "inactive",
                         "running" if state.running else "dead", "success", state.main_pid, 0, 0, "")

    def exec_start_argv(self, unit: str) -> list[list[str]]:
        return []

    def is_enabled(self, unit: str) -> bool:
        return self.units.setdefault(unit, FakeUnit()).enabled

    def set_enabled(self, unit: str, enabled: bool) -> None:
        self._call("enable" if enabled else "disable", unit).enabled = enabled

    def running(self) -> list[str]:
        return sorted(name for name, state in self.units.items() if state.running)


@dataclass
class FakeGate:
    """The health gate: healthy when the gated unit runs, unless told to fail; records what it gated."""

    failures: list[BaseException] = field(default_factory=list)
    gated: list[str] = field(default_factory=list)
    asked: list[dict[str, Any]] = field(default_factory=list)  # every call's alias and keywords, with its URL
    before: Callable[[], None] = lambda: None  # runs as each gate begins (what the test wants to see then)

    def __call__(self, base_url: str, alias: str, *, unit_state: Callable[[], UnitState],
                 **options: Any) -> HealthResult:
        self.before()
        self.gated.append(base_url)
        self.asked.append({"base_url": base_url, "alias": alias, "unit": unit_state().name, **options})
        if self.failures:
            raise self.failures.pop(0)
        if not unit_state().running:
            raise HealthError(f"{base_url}: the unit does not run")
        return HealthResult(True, "healthy", 0.1, 0.2)
