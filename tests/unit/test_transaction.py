"""The switch/rollback transaction over fake seams: every failure path, in milliseconds.

The systemd client, the health gate, the journal and the preflight are fakes (named so); the unit
file, the backups, the intent record, the content store and the history are real files in a tmp
dir. What a user relies on: after any failure or interruption the unit file is the old one or
the new one, whole; nothing restarts the server when nothing was changed; read-only callers see
a pending intent without acting on it; recovery leaves no intent and no temp file behind; history
tells the truth.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from specd.deploy import intent as intents
from specd.deploy import unitfiles
from specd.deploy.health import HealthResult
from specd.deploy.history import History
from specd.deploy.plan import StepHook
from specd.deploy.preflight import Preflight
from specd.deploy.seams import Seams
from specd.deploy.switch import STEPS, Switcher
from specd.deploy.systemd import UnitState
from specd.errors import HealthError, PreflightError, SwitchFailed, SystemdError
from specd.gpu.gguf import GgufInfo
from specd.paths import StateDir
from specd.profiles.config import Deployment
from specd.profiles.load import load_profile
from tests.fakes.switch_world import FaultAt, SimulatedKill

UNIT = "llama-test.service"
AFTER_INTENT = [s for s in STEPS if s not in ("preflight", "commit")]


@dataclass
class FakeSystemdClient:
    """A scripted service manager: counts restarts, hands out new MainPIDs, fails where told."""

    scope: str = "user"
    main_pid: int = 100
    active: bool = True
    calls: list[str] = field(default_factory=list)
    fail: dict[str, BaseException] = field(default_factory=dict)

    def _call(self, name: str) -> None:
        self.calls.append(name)
        failure = self.fail.pop(name, None)
        if failure is not None:
            raise failure

    def reload(self) -> None:
        self._call("reload")

    def restart(self, unit: str, *, timeout_s: float = 90.0) -> UnitState:
        self._call("restart")
        self.main_pid += 1
        self.active = True
        return self.unit_state(unit)

    def stop(self, unit: str, *, timeout_s: float = 90.0) -> UnitState:
        self._call("stop")
        self.active = False
        return self.unit_state(unit)

    def reset_failed(self, unit: str) -> None:
        self.calls.append("reset_failed")

    def kill(self, unit: str, signum: int) -> None:
        self._call("kill")
        self.active = False

    def unit_state(self, unit: str) -> UnitState:
        return UnitState(unit, "loaded", "active" if self.active else "inactive", "running" if self.active else "dead",
                         "success", self.main_pid if self.active else 0, 0, 0, "")

    def exec_start_argv(self, unit: str) -> list[list[str]]:
        return []


@dataclass
class FakeGate:
    """The health gate: healthy unless told to fail the next N calls."""

    failures: list[BaseException] = field(default_factory=list)
    calls: int = 0

    def __call__(self, base_url: str, alias: str, **_: Any) -> HealthResult:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return HealthResult(True, "healthy", 0.1, 0.2)


@dataclass
class RecordingGate(FakeGate):
    """The FAKE gate, noting the settings each call was given."""

    asked: list[dict[str, Any]] = field(default_factory=list)

    def __call__(self, base_url: str, alias: str, **settings: Any) -> HealthResult:
        self.asked.append({"base_url": base_url, "alias": alias, **settings})
        return super().__call__(base_url, alias, **settings)


def unit_text(profile: str) -> str:
    return (f"# specd-profile: {profile}\n[Service]\n"
            f"ExecStart=/opt/llama-server -m /m/{profile}.gguf --alias tiny --port 8080\n")


@dataclass
class World:
    deployment: Deployment
    systemd: FakeSystemdClient
    gate: FakeGate
    history: History
    state: StateDir

    @property
    def unit_path(self) -> Path:
        return self.deployment.unit_path

    def switcher(self, fault: FaultAt | None = None, on_step: StepHook | None = None) -> Switcher:
        def fake_preflight(deployment: Deployment, name: str, *, current_main_pid: int = 0) -> Preflight:
            profile = load_profile(deployment.profiles_dir, name)
            info = GgufInfo.__new__(GgufInfo)
            return Preflight(profile, [], unit_text(name), info, None)

        seams = Seams(self.deployment, self.state, self.history, connect=lambda: self.systemd)
        return Switcher(seams, gate=self.gate, journal=lambda unit, scope: "(fake journal)", fault=fault or FaultAt(),
                        preflight=fake_preflight, on_step=on_step)

    def intent(self) -> intents.Intent | None:
        """The pending intent record, as a read-only command sees it."""
        return intents.load(self.state.intent(UNIT))

    def temp_files(self) -> list[str]:
        return [p.name for p in self.unit_path.parent.glob(".*specd-tmp-*")]


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    return make_world(tmp_path, monkeypatch)


def make_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    """Profiles old and new, old installed and running, the FAKE systemd's calls cleared."""
    # The transaction gets its state directory from its seams: the environment's must stay untouched.
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "environment-state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    for name in ("old", "new"):
        (profiles / f"{name}.toml").write_text(
            f'binary = "/opt/llama-server"\nmodel = "/m/{name}.gguf"\nalias = "tiny"\nport = 8080\n'
            "health_timeout_s = 5\nstability_s = 0\n")
    state = StateDir(tmp_path / "state" / "specd")
    world = World(Deployment(UNIT, "user", profiles), FakeSystemdClient(), FakeGate(), History(state.db), state)
    world.switcher().switch("old")
    world.systemd.calls.clear()
    return world


def test_a_good_switch_commits_and_leaves_nothing_behind(world: World) -> None:
    outcome = world.switcher().switch("new")
    assert outcome.generation.outcome == "ok" and outcome.generation.profile == "new"
    assert world.unit_path.read_text() == unit_text("new")
    assert world.intent() is None and world.temp_files() == []
    assert next(b.path.read_text() for b in unitfiles.list_backups(world.unit_path)) == unit_text("old")


def test_the_transaction_keeps_its_state_where_its_seams_say(world: World, tmp_path: Path) -> None:
    world.gate.failures.append(HealthError("never healthy"))
    with pytest.raises(SwitchFailed):
        world.switcher().switch("new")
    world.switcher().switch("new")
    world.switcher().rollback()
    assert sorted(p.name for p in world.state.root.iterdir()) == ["intents", "locks", "specd.db", "specd.db-shm",
                                                                  "specd.db-wal", "units"]
    assert not (tmp_path / "environment-state").exists()


@pytest.mark.parametrize("failure", [
    HealthError("the alias never answered"),
    SystemdError("Job for llama-test.service failed"),
    RuntimeError("a bug in specd"),
    OSError(errno.EIO, "I/O error"),
    KeyboardInterrupt(),
], ids=lambda f: type(f).__name__)
def test_any_failure_at_the_gate_reverts_to_the_old_unit(world: World, failure: BaseException) -> None:
    world.gate.failures.append(failure)
    with pytest.raises(SwitchFailed) as raised:
        world.switcher().switch("new")
    expected = "interrupted" if isinstance(failure, KeyboardInterrupt) else str(failure)
    assert expected in str(raised.value)  # the message says what went wrong
    assert world.unit_path.read_text() == unit_text("old")
    assert world.intent() is None and world.temp_files() == []
    assert world.history.list(UNIT, limit=1)[0].outcome == "reverted"
    assert world.systemd.calls.count("restart") == 2  # the new profile, then the old one again


@pytest.mark.parametrize("step", ["intent", "backup", "write", "reload", "restart", "gate"])
@pytest.mark.parametrize("error", [RuntimeError("bug"), PreflightError("disk full"), KeyboardInterrupt()],
                         ids=lambda e: type(e).__name__)
def test_an_exception_at_any_step_after_the_intent_reverts(world: World, step: str, error: BaseException) -> None:
    with pytest.raises(SwitchFailed):
        world.switcher(FaultAt(step, error)).switch("new")
    assert world.unit_path.read_text() == unit_text("old")
    assert world.intent() is None and world.temp_files() == []
    assert world.history.list(UNIT, limit=1)[0].outcome == "reverted"


@pytest.mark.parametrize("error", [KeyboardInterrupt(), SystemdError("the daemon's drain failed")],
                         ids=lambda e: type(e).__name__)
def test_a_switch_interrupted_before_its_restart_began_reverts_without_restarting(world: World,
                                                                                  error: BaseException) -> None:
    # Ctrl-C while the restart step waits in the proxy's drain for in-flight streams: no restart reached systemd.
    old_pid = world.systemd.main_pid
    world.systemd.fail["restart"] = error
    with pytest.raises(SwitchFailed) as raised:
        world.switcher().switch("new")
    assert world.unit_path.read_text() == unit_text("old")
    assert world.systemd.main_pid == old_pid and world.systemd.calls.count("restart") == 1  # the failed one only
    assert "kept running" in str(raised.value) and world.history.list(UNIT, limit=1)[0].outcome == "reverted"
    assert world.intent() is None


def test_a_failed_backup_restarts_nothing(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    real_write = unitfiles.atomic_write

    def failing_backup(path: Path, data: bytes, **kwargs: Any) -> None:
        if kwargs.get("fault_name") == "backup":
            raise OSError(errno.EACCES, "Permission denied")
        real_write(path, data, **kwargs)

    monkeypatch.setattr("specd.deploy.unitfiles.atomic_write", failing_backup)
    pid = world.systemd.main_pid
    with pytest.raises(SwitchFailed, match="nothing was changed"):
        world.switcher().switch("new")
    assert world.systemd.calls.count("restart") == 0 and world.systemd.main_pid == pid
    assert world.unit_path.read_text() == unit_text("old") and world.intent() is None


@pytest.mark.parametrize("step", AFTER_INTENT)
def test_a_kill_at_any_step_leaves_a_pending_intent_that_only_recovery_acts_on(world: World, step: str) -> None:
    with pytest.raises(SimulatedKill):
        world.switcher(FaultAt(step)).switch("new")
    text = world.unit_path.read_text()
    assert text in (unit_text("old"), unit_text("new"))  # whole, never half
    pending = world.switcher().pending_intent()
    assert pending is not None and pending.step == step
    pid, restarts = world.systemd.main_pid, world.systemd.calls.count("restart")
    world.switcher().active_profile()  # read-only callers look, and change nothing
    world.switcher().pending_intent()
    assert world.systemd.main_pid == pid and world.systemd.calls.count("restart") == restarts

    world.switcher().recover()
    assert world.unit_path.read_text() == unit_text("old")
    assert world.intent() is None and world.temp_files() == []
    newest = world.history.list(UNIT, limit=1)[0]
    assert newest.profile == "new" and newest.outcome == "reverted"


@pytest.mark.parametrize("step", ["intent", "backup"])
def test_recovering_a_kill_before_the_unit_was_replaced_keeps_the_server_running(world: World, step: str) -> None:
    with pytest.raises(SimulatedKill):
        world.switcher(FaultAt(step)).switch("new")
    pid = world.systemd.main_pid
    world.switcher().recover()
    assert world.systemd.main_pid == pid and "restart" not in world.systemd.calls


def test_a_kill_while_writing_a_backup_leaves_no_temp_file_after_recovery(world: World,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    real_write = unitfiles.atomic_write

    def killed_mid_backup(path: Path, data: bytes, **kwargs: Any) -> None:
        if kwargs.get("fault_name") == "backup":
            tmp = path.with_name(f".{path.name}{unitfiles.TMP_INFIX}4242")
            tmp.write_bytes(data[:10])  # what a kill before the rename leaves
            raise SimulatedKill()
        real_write(path, data, **kwargs)

    monkeypatch.setattr("specd.deploy.unitfiles.atomic_write", killed_mid_backup)
    with pytest.raises(SimulatedKill):
        world.switcher().switch("new")
    assert any(".pre-" in name for name in world.temp_files())
    monkeypatch.setattr("specd.deploy.unitfiles.atomic_write", real_write)
    world.switcher().recover()
    assert world.temp_files() == [] and world.intent() is None


def test_a_revert_that_fails_says_so_and_leaves_a_whole_unit(world: World) -> None:
    world.gate.failures += [HealthError("new never answered"), HealthError("old never answered either")]
    with pytest.raises(SwitchFailed, match="the revert failed too"):
        world.switcher().switch("new")
    assert world.unit_path.read_text() == unit_text("old")
    assert world.intent() is None
    assert world.history.list(UNIT, limit=1)[0].outcome == "failed"


@pytest.mark.parametrize("step", ["backup", "write", "restart", "gate"])
def test_a_kill_during_rollback_is_recovered_to_the_unit_before_it(world: World, step: str) -> None:
    world.switcher().switch("new")
    with pytest.raises(SimulatedKill):
        world.switcher(FaultAt(step)).rollback()
    assert world.switcher().pending_intent() is not None
    world.switcher().recover()
    assert world.unit_path.read_text() == unit_text("new")
    assert world.intent() is None and world.temp_files() == []
    world.switcher().rollback()
    assert world.unit_path.read_text() == unit_text("old")


@pytest.mark.parametrize("step", ["write", "reload", "restart"])
def test_an_interrupted_switch_is_never_recorded_as_a_hand_edit(world: World, step: str) -> None:
    with pytest.raises(SimulatedKill):
        world.switcher(FaultAt(step)).switch("new")
    assert world.unit_path.read_text() == unit_text("new")  # the unit already names the aborted profile
    assert world.switcher().record_external_edit() is None  # what the daemon's watcher calls
    kinds = [g.kind for g in world.history.list(UNIT)]
    assert kinds and "external-edit" not in kinds
    world.switcher().recover()
    assert world.unit_path.read_text() == unit_text("old")
    assert world.switcher().record_external_edit() is None


def test_without_journald_the_revert_message_says_why_there_are_no_log_lines(tmp_path: Path) -> None:
    from specd.deploy.systemd import journal_tail

    note = journal_tail("llama.service", "user", journal_socket=tmp_path / "absent")
    assert "no systemd-journald" in note and "ExecStart=" in note


def test_a_failed_switch_says_how_its_revert_went_in_typed_fields(world: World) -> None:
    """What `specd switch --json` (and the Ansible module) report without parsing the message."""
    world.gate.failures.append(HealthError("the alias never answered"))
    with pytest.raises(SwitchFailed) as raised:
        world.switcher().switch("new")
    failure = raised.value
    assert failure.revert_outcome == "reverted"
    assert failure.revert_state == "reverted to old, which is healthy again"
    failed = world.history.get(failure.generation_id or 0)
    assert failed is not None and failed.outcome == "reverted" and failed.profile == "new"

    world.gate.failures.extend([HealthError("the alias never answered"), HealthError("the old one neither")])
    with pytest.raises(SwitchFailed) as raised_again:
        world.switcher().switch("new")
    assert raised_again.value.revert_outcome == "failed"
    assert "the old one neither" in (raised_again.value.revert_state or "")


def test_the_step_hook_hears_every_step_in_order_and_a_revert_with_its_reason(world: World) -> None:
    heard: list[tuple[str, str]] = []
    switcher = world.switcher(on_step=lambda step, detail: heard.append((step, detail)))
    switcher.switch("new")
    assert [step for step, _ in heard] == list(STEPS)
    assert "generation" in dict(heard)["intent"] and "restarted" in dict(heard)["restart"]

    heard.clear()
    world.gate.failures.append(HealthError("the alias never answered"))
    with pytest.raises(SwitchFailed):
        switcher.switch("old")
    steps = [step for step, _ in heard]
    assert steps[:steps.index("restart") + 1] == [s for s in STEPS if s not in ("gate", "commit")]
    assert ("revert", "the alias never answered") in heard
    assert steps[-3:] == ["revert-reload", "revert-restart", "revert-gate"]
    reverted = world.history.list(UNIT, limit=1)[0]
    journal = [e["detail"] for e in world.history.events(UNIT) if e["kind"] == "revert-journal"]
    assert journal == [f"generation {reverted.id}\n(fake journal)"]


def test_a_step_hook_that_raises_changes_nothing(world: World) -> None:
    def broken(step: str, detail: str) -> None:
        raise RuntimeError("a listener's bug")

    switcher = world.switcher(on_step=broken)
    assert switcher.switch("new").generation.outcome == "ok"
    assert world.unit_path.read_text() == unit_text("new")
