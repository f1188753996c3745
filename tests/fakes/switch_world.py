"""A switch's world over fake seams, for the unit tests of switches, rollbacks and their plans.

The service manager (two units), the health gate, the daemon's proxy, the old server's load and the
CPU priority are fakes (named so); the unit files, backups, slot pointer, intent record, content
store and history are real files in a tmp dir. The preflight is the real one's output for a profile
(its argv rendered, its key file from `secret_files`) without reading a model.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from specd.deploy import intent as intents
from specd.deploy.capacity import Capacity
from specd.deploy.history import History, Trigger
from specd.deploy.preflight import Preflight
from specd.deploy.priority import Lowered
from specd.deploy.seams import Seams
from specd.deploy.slots import companion_unit, read_pointer, slot
from specd.deploy.switch import Switcher
from specd.gpu.gguf import GgufInfo
from specd.paths import StateDir
from specd.profiles.config import Deployment, ProxyConfig
from specd.profiles.load import load_profile
from specd.unit.render import exec_start_line, secret_files
from tests.fakes.fake_slots import FakeGate, FakeSlotsSystemd

UNIT = "llama-test.service"
GREEN = companion_unit(UNIT)

class SimulatedKill(BaseException):
    """Stands for SIGKILL at a fault point: nothing after it runs, no handler sees it as an Exception."""


@dataclass
class FakeProxyLink:
    """The daemon's proxy: records which slot the pointer named each time it was told to follow."""

    state: StateDir
    deployment: Deployment
    serves: bool = True
    followed: list[str] = field(default_factory=list)
    told: list[str] = field(default_factory=list)  # the unit each retarget named
    drains: list[str] = field(default_factory=list)
    before: Callable[[], None] = lambda: None  # runs as each retarget begins

    def serving(self, unit: str) -> bool:
        return self.serves

    def retarget(self, unit: str) -> bool | None:
        self.before()
        self.told.append(unit)
        self.followed.append(read_pointer(self.state, self.deployment))
        return True

    def drained(self, unit: str) -> AbstractContextManager[object]:
        self.drains.append(unit)
        return nullcontext()


@dataclass
class FakeOldServerLoad:
    """The old server's /slots: busy for the first `busy_polls` reads after the flip, then idle."""

    busy_polls: int = 0
    reads: int = 0
    api_key: str | None = None  # a server started with --api-key answers 401 to a request without it
    refused: int = 0

    def handler(self, request: httpx.Request) -> httpx.Response:
        if self.api_key is not None and request.headers.get("authorization") != f"Bearer {self.api_key}":
            self.refused += 1
            return httpx.Response(401, json={"error": {"message": "Invalid API Key"}})
        if request.url.path == "/slots":
            self.reads += 1
            busy = self.reads <= self.busy_polls
            return httpx.Response(200, json=[{"id": 0, "is_processing": busy}])
        return httpx.Response(404)


@dataclass
class FakePriority:
    """The new server's CPU priority as a fake: what was lowered and given back, and what the gate and
    the proxy's flip saw at their moment (a real setpriority on fake PIDs could hit a real process)."""

    refuse: str | None = None
    lowered: dict[int, int] = field(default_factory=dict)  # pid -> nice while loading
    log: list[str] = field(default_factory=list)

    def lower(self, pid: int) -> Lowered | str:
        if self.refuse is not None:
            return self.refuse
        self.lowered[pid] = 10
        self.log.append(f"lower {pid}")
        return Lowered(pid, 0, 10)

    def restore(self, lowered: Lowered) -> str | None:
        del self.lowered[lowered.pid]
        self.log.append(f"restore {lowered.pid}")
        return None


@dataclass
class SteppedClock:
    """Monotonic time that moves only when something sleeps: waits cost no real time."""

    now: float = 1000.0

    def time(self) -> float:
        return 1.7e9 + self.now

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class FaultAt:
    """A fault hook that raises at one named step (the way SIGKILL stops the process there)."""

    def __init__(self, step: str | None = None, error: BaseException | None = None) -> None:
        self.step, self.error, self.seen = step, error or SimulatedKill(), []  # type: list[str]

    def __call__(self, step: str) -> None:
        self.seen.append(step)
        if step == self.step:
            raise self.error


def unit_text(profile: str, port: int = 8081, key_file: Path | None = None) -> str:
    """The unit specd renders for the test profile `profile` (with `--api-key-file` when it has a key)."""
    argv = ["/opt/llama-server", "-m", f"/m/{profile}.gguf", "--alias", "tiny", "--port", str(port)]
    argv += ["--api-key-file", str(key_file)] if key_file is not None else []
    return f"# specd-profile: {profile}\n[Service]\nExecStart={exec_start_line(argv)}\n"


@dataclass
class World:
    deployment: Deployment
    systemd: FakeSlotsSystemd
    gate: FakeGate
    history: History
    state: StateDir
    proxy: FakeProxyLink
    load: FakeOldServerLoad
    priority: FakePriority = field(default_factory=FakePriority)
    fits: Capacity = field(default_factory=lambda: Capacity(True, "fits (fake)"))
    ports_held: set[int] = field(default_factory=set)
    capacity_asked: list[tuple[Any, Any]] = field(default_factory=list)  # (new, running) per capacity check

    @property
    def blue(self) -> Path:
        return slot(self.deployment, "blue").unit_path

    @property
    def green(self) -> Path:
        return slot(self.deployment, "green").unit_path

    def pointer(self) -> str:
        return read_pointer(self.state, self.deployment)

    def seams(self, history: History | None = None) -> Seams:
        return Seams(self.deployment, self.state, history or self.history, connect=lambda: self.systemd,
                     proxy=self.proxy, priority=self.priority,
                     http=lambda timeout_s: httpx.Client(transport=httpx.MockTransport(self.load.handler)),
                     clock=SteppedClock())

    def switcher(self, fault: FaultAt | None = None, *, seams: Seams | None = None,
                 trigger: Trigger = "cli") -> Switcher:
        def fake_preflight(deployment: Deployment, name: str, *, current_main_pid: int = 0) -> Preflight:
            profile = load_profile(deployment.profiles_dir, name)
            secrets = secret_files(profile)
            text = unit_text(name, key_file=secrets[0][0] if secrets else None)
            return Preflight(profile, [], text, GgufInfo.__new__(GgufInfo), None, secrets=secrets)

        return Switcher(seams or self.seams(), trigger=trigger, gate=self.gate,
                        journal=lambda unit, scope: "(fake journal)", fault=fault or FaultAt(),
                        preflight=fake_preflight, capacity=self.capacity,
                        ports_in_use=lambda port: {4242} if port in self.ports_held else set())

    def capacity(self, new: Any, running: Any) -> Capacity:
        self.capacity_asked.append((new, running))
        return self.fits

    def intent(self) -> intents.Intent | None:
        return intents.load(self.state.intent(UNIT))

    def serving_pid(self) -> int:
        return self.systemd.units[slot(self.deployment, self.pointer()).unit].main_pid  # type: ignore[arg-type]

    def assert_one_server_named_by_the_pointer(self) -> None:
        """One server runs, the pointer's, and it runs what its unit file says (systemd reloaded the file)."""
        serving = slot(self.deployment, self.pointer())  # type: ignore[arg-type]
        assert self.systemd.running() == [serving.unit]
        assert self.systemd.units[serving.unit].started_from == serving.unit_path.read_text()


def profiles_dir_with(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, names: tuple[str, ...],
                      port: int = 8081) -> Path:
    """A profiles directory with one test profile per name (model /m/NAME.gguf, alias tiny, `port`), and the
    environment's state and config dirs (where rendered units name key files) inside `tmp_path`."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "environment-state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    for name in names:
        (profiles / f"{name}.toml").write_text(
            f'binary = "/opt/llama-server"\nmodel = "/m/{name}.gguf"\nalias = "tiny"\nport = {port}\n'
            "health_timeout_s = 5\nstability_s = 0\n")
    return profiles


def make_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, proxy: bool = True,
               first: str | None = "old") -> World:
    profiles = profiles_dir_with(tmp_path, monkeypatch, ("old", "new", "third"))
    state = StateDir(tmp_path / "state" / "specd")
    deployment = Deployment(UNIT, "user", profiles, proxy=ProxyConfig(listen_port=8080) if proxy else None)
    world = World(deployment, FakeSlotsSystemd(), FakeGate(), History(state.db), state,
                  FakeProxyLink(state, deployment), FakeOldServerLoad())
    world.systemd.unit_files = {UNIT: world.blue, GREEN: world.green}
    if first is not None:
        world.switcher().switch(first, "restart")
    world.systemd.calls.clear()
    world.gate.gated.clear()
    return world
