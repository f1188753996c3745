"""The blue-green switch over fake seams: every step, every failure, every kill, in milliseconds.

The service manager (two units now), the health gate, the daemon's proxy and the old server's
load are fakes (named so); the unit files, backups, slot pointer, intent record, content store and
history are real files in a tmp dir. What a user relies on: clients are never sent to a server
that has not passed the gate, the old server keeps serving until the new one does, after any
failure or kill exactly one server runs and it is the one the pointer (so the proxy) names, and
history says which slot serves and how each switch replaced the server.
"""

from __future__ import annotations

import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from specd.deploy.capacity import Capacity
from specd.deploy.plans import BLUE_GREEN_REVERT_STEPS, BLUE_GREEN_STEPS
from specd.deploy.slots import port_of
from specd.deploy.status import pending_note
from specd.deploy.unitfiles import list_backups
from specd.errors import HealthError, PreflightError, SwitchFailed
from specd.unit.render import exec_start_line
from tests.fakes.switch_world import (
    GREEN,
    UNIT,
    FaultAt,
    SimulatedKill,
    World,
    make_world,
    unit_text,
)

AFTER_INTENT = [s for s in BLUE_GREEN_STEPS if s not in ("preflight", "commit")]


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    return make_world(tmp_path, monkeypatch)


def test_blue_green_starts_beside_the_old_server_and_flips_only_after_the_gate(world: World) -> None:
    old_pid = world.serving_pid()
    outcome = world.switcher().switch("new")
    generation = outcome.generation
    assert (generation.outcome, generation.slot, generation.strategy) == ("ok", "green", "blue-green")
    assert world.pointer() == "green" and world.proxy.followed == ["green"]
    assert world.blue.read_text() == unit_text("old")  # the old slot's unit is untouched
    assert world.green.read_text() == unit_text("new", 8082)  # the old server held 8081: the new one takes 8082
    assert world.gate.gated == ["http://127.0.0.1:8082"]  # the new server was gated on its own port
    calls = world.systemd.calls
    assert ("restart", UNIT) not in calls  # the old server was never restarted
    assert calls.index(("restart", GREEN)) < calls.index(("stop", UNIT))
    assert world.systemd.running() == [GREEN] and world.serving_pid() != old_pid
    assert world.intent() is None
    assert next(b.path.read_text() for b in list_backups(world.blue)) == unit_text("old")  # backups beside the unit
    assert any("blue-green into the green slot" in note for note in outcome.notes)


def test_the_new_server_loads_and_is_gated_at_low_priority_and_serves_at_its_own(world: World) -> None:
    seen_by_gate: list[dict[int, int]] = []
    seen_by_flip: list[dict[int, int]] = []
    world.gate.before = lambda: seen_by_gate.append(dict(world.priority.lowered))
    world.proxy.before = lambda: seen_by_flip.append(dict(world.priority.lowered))
    outcome = world.switcher().switch("new")
    new_pid = world.serving_pid()
    assert world.priority.log == [f"lower {new_pid}", f"restore {new_pid}"]
    assert seen_by_gate == [{new_pid: 10}]  # the gate's requests ran at the lowered priority
    assert seen_by_flip == [{}]  # given back before the proxy sent it anything
    assert any("gated at nice 10 (the live server kept its CPU), then went back to nice 0" in n for n in outcome.notes)


def test_a_server_whose_priority_could_not_be_given_back_is_never_lowered(world: World) -> None:
    world.priority.refuse = "giving it back after the gate would need root, CAP_SYS_NICE or LimitNICE= in its unit"
    outcome = world.switcher().switch("new")
    assert outcome.generation.outcome == "ok" and world.priority.log == []
    assert any("loaded beside the live one at its own priority: giving it back" in n for n in outcome.notes)


def test_a_restart_switch_leaves_the_priority_alone(world: World) -> None:
    world.switcher().switch("new", "restart")
    assert world.priority.log == []


def test_successive_blue_green_switches_alternate_slots_and_ports(world: World) -> None:
    world.switcher().switch("new")
    world.switcher().switch("third")
    assert world.pointer() == "blue" and port_of(world.blue.read_text()) == 8081
    assert world.blue.read_text() == unit_text("third")
    world.assert_one_server_named_by_the_pointer()
    slots = [(g.profile, g.slot, g.strategy) for g in reversed(world.history.list(UNIT))]
    assert slots == [("old", "blue", "restart"), ("new", "green", "blue-green"), ("third", "blue", "blue-green")]


def test_the_old_server_finishes_its_streams_before_it_is_stopped(world: World) -> None:
    world.load.busy_polls = 3
    outcome = world.switcher().switch("new")
    assert world.load.reads > 3  # stopped only after it reported idle
    assert any("finished its 1 request(s) in flight" in note for note in outcome.notes)


def test_switching_to_the_profile_that_serves_on_the_spare_port_changes_nothing(world: World) -> None:
    world.switcher().switch("new")
    world.systemd.calls.clear()
    outcome = world.switcher().switch("new")
    assert outcome.unchanged and world.systemd.calls == []


@pytest.mark.parametrize(("setup", "why"), [
    (lambda w: setattr(w.proxy, "serves", False), "the specd daemon's proxy is not running"),
    (lambda w: setattr(w, "fits", Capacity(False, "1 + 2 threads on 2 cores")), "1 + 2 threads on 2 cores"),
    (lambda w: w.ports_held.add(8082), "port 8082 for the new server is in use"),
], ids=["no-daemon", "does-not-fit", "port-taken"])
def test_auto_falls_back_to_a_restart_and_says_why(world: World, setup: Callable[[World], None], why: str) -> None:
    setup(world)
    outcome = world.switcher().switch("new")
    assert (outcome.generation.strategy, outcome.generation.slot) == ("restart", "blue")
    assert any(note.startswith("strategy: restart, because") and why in note for note in outcome.notes)
    assert why in outcome.generation.detail
    assert world.pointer() == "blue" and world.blue.read_text() == unit_text("new")
    assert not world.green.exists()


def test_auto_without_a_proxy_section_restarts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    world = make_world(tmp_path, monkeypatch, proxy=False)
    outcome = world.switcher().switch("new")
    assert outcome.generation.strategy == "restart" and "has no [proxy]" in outcome.generation.detail


@pytest.mark.parametrize("setup", [
    lambda w: setattr(w, "fits", Capacity(False, "VRAM: needs 30 GiB, 20 GiB free")),
    lambda w: w.ports_held.add(8082),
], ids=["does-not-fit", "port-taken"])
def test_a_forced_blue_green_that_cannot_be_done_changes_nothing(world: World, setup: Callable[[World], None]) -> None:
    setup(world)
    before = (world.blue.read_text(), world.serving_pid(), len(world.history.list(UNIT)))
    with pytest.raises(PreflightError, match="--strategy blue-green: .*nothing was changed") as refused:
        world.switcher().switch("new", "blue-green")
    assert "--strategy restart" in (refused.value.hint or "")
    assert (world.blue.read_text(), world.serving_pid(), len(world.history.list(UNIT))) == before
    assert world.systemd.calls == [] and not world.green.exists()


def test_a_new_server_that_fails_its_gate_never_receives_a_request(world: World) -> None:
    old_pid = world.serving_pid()
    world.gate.failures.append(HealthError("the alias never answered"))
    with pytest.raises(SwitchFailed) as raised:
        world.switcher().switch("new")
    assert "kept serving in the blue slot" in str(raised.value) and raised.value.revert_outcome == "reverted"
    assert world.proxy.followed == []  # the pointer never moved: the proxy was never told of the new server
    assert world.pointer() == "blue" and world.serving_pid() == old_pid
    world.assert_one_server_named_by_the_pointer()
    assert not world.green.exists() and world.intent() is None
    newest = world.history.list(UNIT, limit=1)[0]
    assert (newest.profile, newest.outcome, newest.slot) == ("new", "reverted", "green")


@pytest.mark.parametrize("step", AFTER_INTENT[1:])  # the intent's own fault point is a kill point only
@pytest.mark.parametrize("error", [RuntimeError("bug"), KeyboardInterrupt()], ids=lambda e: type(e).__name__)
def test_an_exception_at_any_step_leaves_the_old_slot_serving(world: World, step: str, error: BaseException) -> None:
    with pytest.raises(SwitchFailed):
        world.switcher(FaultAt(step, error)).switch("new")
    assert world.pointer() == "blue" and world.blue.read_text() == unit_text("old")
    world.assert_one_server_named_by_the_pointer()
    assert not world.green.exists() and world.intent() is None
    assert world.history.list(UNIT, limit=1)[0].outcome == "reverted"
    assert world.history.active(UNIT).profile == "old"  # type: ignore[union-attr]


@pytest.mark.parametrize("step", AFTER_INTENT)
def test_a_kill_at_any_step_is_recovered_to_one_healthy_server(world: World, step: str) -> None:
    old_pid = world.serving_pid()
    with pytest.raises(SimulatedKill):
        world.switcher(FaultAt(step)).switch("new")
    pending = world.switcher().pending_intent()
    assert pending is not None and pending.step == step and pending.strategy == "blue-green"
    calls = len(world.systemd.calls)
    world.switcher().active_profile()  # read-only callers look and change nothing
    assert len(world.systemd.calls) == calls

    world.switcher().recover()
    assert world.pointer() == "blue" and world.blue.read_text() == unit_text("old")
    world.assert_one_server_named_by_the_pointer()
    assert not world.green.exists() and world.intent() is None
    if step in ("intent", "backup", "write", "reload", "start", "gate", "flip", "drain"):
        assert world.serving_pid() == old_pid  # the old server was never interrupted
    newest = world.history.list(UNIT, limit=1)[0]
    assert (newest.profile, newest.outcome) == ("new", "reverted")
    assert world.switcher().switch("new").generation.slot == "green"  # and the next switch works


@pytest.mark.parametrize("revert_step", BLUE_GREEN_REVERT_STEPS)
def test_a_kill_during_the_revert_is_finished_by_recovery(world: World, revert_step: str) -> None:
    class KillAfter:
        """Fails the switch after it stopped the old server, then kills the revert at `revert_step`."""

        def __call__(self, step: str) -> None:
            if step == "stop-old":
                raise RuntimeError("a bug after the old server stopped")
            if step == revert_step:
                raise SimulatedKill()

    with pytest.raises(SimulatedKill):
        world.switcher(KillAfter()).switch("new")  # type: ignore[arg-type]
    assert world.intent() is not None
    world.switcher().recover()
    assert world.pointer() == "blue" and world.blue.read_text() == unit_text("old")
    world.assert_one_server_named_by_the_pointer()
    assert not world.green.exists() and world.intent() is None


def test_a_revert_after_the_old_server_stopped_brings_it_back_before_stopping_the_new(world: World) -> None:
    with pytest.raises(SwitchFailed) as raised:
        world.switcher(FaultAt("stop-old", RuntimeError("bug"))).switch("new")
    calls = world.systemd.calls
    assert calls.index(("restart", UNIT)) < calls.index(("stop", GREEN))  # no gap: old up before new down
    assert "serves again in the blue slot" in str(raised.value)
    assert world.proxy.followed == ["green", "blue"] and world.proxy.told == [UNIT, UNIT]


def test_boot_start_moves_with_the_service(world: World) -> None:
    world.systemd.units[UNIT].enabled = True
    world.switcher().switch("new")
    assert world.systemd.is_enabled(GREEN) and not world.systemd.is_enabled(UNIT)
    with pytest.raises(SwitchFailed):
        world.switcher(FaultAt("enable", RuntimeError("bug"))).switch("third")
    assert world.systemd.is_enabled(GREEN) and not world.systemd.is_enabled(UNIT)  # back as it was


def test_a_restart_switch_replaces_the_green_slot_in_place_when_it_serves(world: World) -> None:
    world.switcher().switch("new")
    world.systemd.calls.clear()
    outcome = world.switcher().switch("third", "restart")
    assert (outcome.generation.slot, outcome.generation.strategy) == ("green", "restart")
    assert world.pointer() == "green" and world.green.read_text() == unit_text("third")
    assert ("restart", GREEN) in world.systemd.calls and ("restart", UNIT) not in world.systemd.calls
    world.assert_one_server_named_by_the_pointer()


def test_rollback_from_the_green_slot_restores_the_previous_profile_where_it_serves(world: World) -> None:
    world.switcher().switch("new")
    outcome = world.switcher().rollback()
    assert (outcome.generation.profile, outcome.generation.slot) == ("old", "green")
    assert world.pointer() == "green" and world.green.read_text() == unit_text("old")
    world.assert_one_server_named_by_the_pointer()
    new_generation = world.history.list(UNIT)[1].id
    again = world.switcher().rollback(to=new_generation, strategy="blue-green")  # beside: into the blue slot
    assert (again.generation.profile, again.generation.slot, again.generation.strategy) == ("new", "blue", "blue-green")
    assert port_of(world.blue.read_text()) != port_of(world.green.read_text())


def test_a_hand_edit_of_the_serving_green_unit_is_recorded(world: World) -> None:
    world.switcher().switch("new")
    world.green.write_text(unit_text("new", 8082) + "# tuned by hand\n")
    generation = world.switcher().record_external_edit()
    assert generation is not None and generation.kind == "external-edit"
    assert world.switcher().rollback().generation.profile == "new"


def test_an_old_server_that_died_on_its_own_during_a_failed_switch_is_brought_back(world: World) -> None:
    class OldDiesThenBug:
        """The old server dies by itself while the new one is gated, then the gate step fails."""

        def __call__(self, step: str) -> None:
            if step == "gate":
                world.systemd.stop(UNIT)
                raise RuntimeError("a bug in the gate")

    with pytest.raises(SwitchFailed):
        world.switcher(OldDiesThenBug()).switch("new")  # type: ignore[arg-type]
    assert world.pointer() == "blue" and world.blue.read_text() == unit_text("old")
    world.assert_one_server_named_by_the_pointer()  # the old one runs again, the new one is gone


def test_a_forced_blue_green_without_a_proxy_section_is_refused(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    world = make_world(tmp_path, monkeypatch, proxy=False)
    with pytest.raises(PreflightError, match="has no \\[proxy\\].*nothing was changed"):
        world.switcher().switch("new", "blue-green")
    assert world.blue.read_text() == unit_text("old") and world.systemd.calls == []


@pytest.mark.parametrize("strategy", ["auto", "blue-green"])
def test_with_no_server_running_a_switch_restarts_in_place_and_says_why(world: World, strategy: str) -> None:
    world.systemd.stop(UNIT)  # the old server is down: there is nothing to keep serving beside
    outcome = world.switcher().switch("new", strategy)  # type: ignore[arg-type]
    assert (outcome.generation.strategy, outcome.generation.slot) == ("restart", "blue")
    assert "strategy: restart, because no server runs now" in outcome.generation.detail
    world.assert_one_server_named_by_the_pointer()
    assert not world.green.exists()


def test_auto_restarts_in_place_when_the_old_server_listens_on_a_unix_socket(world: World) -> None:
    argv = ["/opt/llama-server", "-m", "/m/old.gguf", "--alias", "tiny", "--host", "/run/tiny.sock"]
    world.blue.write_text(f"# specd-profile: old\n[Service]\nExecStart={exec_start_line(argv)}\n")
    outcome = world.switcher().switch("new")
    assert outcome.generation.strategy == "restart" and "Unix socket /run/tiny.sock" in outcome.generation.detail
    assert not world.green.exists() and world.blue.read_text() == unit_text("new")


def test_the_first_install_names_no_backup_and_a_later_one_names_the_backup_it_wrote(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    world = make_world(tmp_path, monkeypatch, first=None)
    first = world.switcher().switch("old").generation
    assert first.backup_path is None and list_backups(world.blue) == []
    second = world.switcher().switch("new", "restart").generation
    assert second.backup_path is not None and Path(second.backup_path).read_text() == unit_text("old")
    assert [Path(second.backup_path)] == [b.path for b in list_backups(world.blue)]


@pytest.mark.parametrize("strategy", ["restart", "blue-green"])
def test_a_failed_switch_and_a_pending_one_say_what_was_being_installed(world: World, strategy: str) -> None:
    with pytest.raises(SwitchFailed) as raised:
        world.switcher(FaultAt("gate", RuntimeError("bug"))).switch("new", strategy)  # type: ignore[arg-type]
    assert str(raised.value).startswith("switch to new failed: ")
    with pytest.raises(SimulatedKill):
        world.switcher(FaultAt("gate")).switch("new", strategy)  # type: ignore[arg-type]
    assert pending_note(world.seams()) == ("an interrupted switch to new (stopped after step 'gate') awaits "
                                           "recovery: run `specd recover`")


def test_history_records_how_long_each_part_of_a_switch_and_a_rollback_took(world: World) -> None:
    """`specd history`'s timing columns: the restart, the gate and the whole, from the seams' clock."""
    seams = world.seams()
    clock = seams.clock
    restart = world.systemd.restart

    def restart_taking_two_seconds(unit: str, *, timeout_s: float = 90.0) -> Any:
        clock.now += 2.0  # type: ignore[attr-defined]
        return restart(unit, timeout_s=timeout_s)

    world.systemd.restart = restart_taking_two_seconds  # type: ignore[method-assign]
    switched = world.switcher(seams=seams).switch("new", "restart").generation
    health = world.gate(unit_state=lambda: world.systemd.unit_state(UNIT), base_url="u", alias="a")
    assert (switched.preflight_s, switched.restart_s, switched.health_s) == (0.0, 2.0, health.total_s)
    assert switched.total_s == 2.0  # the restart's 2 s; nothing else moved the clock
    rolled = world.switcher(seams=seams).rollback().generation
    assert (rolled.preflight_s, rolled.restart_s, rolled.total_s) == (0.0, 2.0, 2.0)  # a rollback has no preflight
    beside = world.switcher(seams=seams).switch("third", "blue-green").generation
    assert (beside.strategy, beside.restart_s) == ("blue-green", 2.0)  # the new server's start, beside the old


def test_the_capacity_check_weighs_the_new_unit_beside_the_running_one(world: World) -> None:
    world.switcher().switch("new", "blue-green")
    [(new, running)] = world.capacity_asked
    assert new.unit_text == unit_text("new") and running.option("-m") == "/m/old.gguf"  # a switch: its preflight
    world.capacity_asked.clear()
    world.switcher().rollback(strategy="blue-green")
    [(text, running)] = world.capacity_asked
    assert text == unit_text("old") and running.option("-m") == "/m/new.gguf"  # a rollback: the unit text it restores


@pytest.mark.parametrize("strategy", ["restart", "blue-green"])
def test_a_profile_with_an_api_key_is_gated_with_it(world: World, strategy: str) -> None:
    (world.deployment.profiles_dir / "keyed.toml").write_text(
        'binary = "/opt/llama-server"\nmodel = "/m/keyed.gguf"\nalias = "tiny"\nport = 8081\napi_key = "sk-test"\n'
        "health_timeout_s = 5\nstability_s = 0\n")
    world.switcher().switch("keyed", strategy)  # type: ignore[arg-type]
    assert world.gate.asked[-1]["api_key"] == "sk-test"


def test_the_switch_s_state_files_are_readable_by_their_owner_only(world: World) -> None:
    """The intent, the slot pointer and the unit store may hold a unit with an API key: 0600, as specd writes keys."""
    world.switcher().switch("new", "blue-green")  # a pointer to the green slot, a unit in the store
    with pytest.raises(SimulatedKill):
        world.switcher(FaultAt("gate")).switch("third", "blue-green")  # an intent left for recovery
    files = [world.state.intent(UNIT), world.state.slot_pointer(UNIT),
             *world.state.unit_store(world.deployment.name).glob("*")]
    assert len(files) >= 4 and all(f.exists() for f in files)
    assert len(set(files)) == len(files)  # by path: the intent and the pointer share a file name
    assert {str(f): stat.S_IMODE(f.stat().st_mode) for f in files} == {str(f): 0o600 for f in files}
