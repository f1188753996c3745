"""Every step of every plan, over fake seams: a kill or an exception at any moment reverts.

Two moments per step: *in* its action, after the action did its work but before the intent
recorded it (the step's effect is on the box, the record does not say so: recovery must undo it
anyway), and *after* it was recorded (its fault point). At each, an exception reverts at once and
a kill (SimulatedKill, which no handler sees) leaves an intent that recovery undoes. The fakes
(systemd, health gate, proxy, old server's load) are those of test_bluegreen; the unit files, slot
pointer, intents, content store and history are real files in a tmp dir.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest

from specd.deploy import intent as intents
from specd.deploy.candidate import recover_candidate, start_candidate
from specd.deploy.plan import Target
from specd.deploy.plans import PLANS, fault_points
from specd.deploy.switch import Switcher
from specd.deploy.transaction import Plan, Run, Step
from specd.errors import SwitchFailed
from tests.fakes.switch_world import GREEN, UNIT, FaultAt, SimulatedKill, World, make_world, unit_text

SWITCHES = [(plan, step.name) for plan in ("restart", "blue-green") for step in PLANS[plan].steps]
SHADOW = [step.name for step in PLANS["shadow"].steps]


class InjectedBug(Exception):
    """An exception raised inside a step, after its action did its work."""


def failing_after_action(plan: Plan, name: str, error: BaseException) -> Plan:
    """The plan whose step `name` does its work, then raises before the intent records it."""

    def wrap(step: Step) -> Step:
        def action(run: Run) -> str:
            step.action(run)
            raise error

        return replace(step, action=action) if step.name == name else step

    return replace(plan, steps=tuple(wrap(step) for step in plan.steps))


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    world = make_world(tmp_path, monkeypatch)
    world.systemd.units[UNIT].enabled = True  # so the enable step has something to move
    return world


def strategy_of(plan: str) -> str:
    return "restart" if plan == "restart" else "blue-green"


def assert_back_as_before(world: World, old_pid: int, *, restarted_ok: bool) -> None:
    """One server, the blue one, on the old unit; green gone; no intent; boot start on blue."""
    assert world.pointer() == "blue" and world.blue.read_text() == unit_text("old")
    world.assert_one_server_named_by_the_pointer()
    assert not world.green.exists() and world.intent() is None
    assert world.systemd.is_enabled(UNIT) and not world.systemd.is_enabled(GREEN)
    if not restarted_ok:
        assert world.serving_pid() == old_pid  # the old server was never interrupted
    newest = world.history.list(UNIT, limit=1)[0]
    assert (newest.profile, newest.outcome) == ("new", "reverted")
    assert world.history.active(UNIT).profile == "old"  # type: ignore[union-attr]


def touched_the_old_server(plan: str, step: str) -> bool:
    """Steps at or after which the old server may have been restarted (restart) or stopped (blue-green)."""
    names = PLANS[plan].names
    first = "restart" if plan == "restart" else "stop-old"
    return names.index(step) >= names.index(first)


@pytest.mark.parametrize(("plan", "step"), SWITCHES)
def test_an_exception_inside_any_step_reverts(world: World, monkeypatch: pytest.MonkeyPatch, plan: str,
                                              step: str) -> None:
    old_pid = world.serving_pid()
    monkeypatch.setitem(PLANS, plan, failing_after_action(PLANS[plan], step, InjectedBug("a bug mid-step")))
    with pytest.raises(SwitchFailed, match="a bug mid-step") as raised:
        world.switcher().switch("new", strategy_of(plan))  # type: ignore[arg-type]
    assert raised.value.revert_outcome == "reverted"
    assert_back_as_before(world, old_pid, restarted_ok=touched_the_old_server(plan, step))


@pytest.mark.parametrize(("plan", "step"), SWITCHES)
def test_a_kill_inside_any_step_is_recovered(world: World, monkeypatch: pytest.MonkeyPatch, plan: str,
                                             step: str) -> None:
    old_pid = world.serving_pid()
    with monkeypatch.context() as patch, pytest.raises(SimulatedKill):
        patch.setitem(PLANS, plan, failing_after_action(PLANS[plan], step, SimulatedKill()))
        world.switcher().switch("new", strategy_of(plan))  # type: ignore[arg-type]
    pending = world.intent()
    assert pending is not None and step not in pending.done  # the record does not know the step ran
    world.switcher().recover()  # with the real plan, as a new process would
    assert_back_as_before(world, old_pid, restarted_ok=touched_the_old_server(plan, step))


@pytest.mark.parametrize(("plan", "step"), SWITCHES)
def test_an_exception_after_any_step_reverts(world: World, plan: str, step: str) -> None:
    old_pid = world.serving_pid()
    with pytest.raises(SwitchFailed):
        world.switcher(FaultAt(step, InjectedBug("a bug after the step"))).switch("new", strategy_of(plan))  # type: ignore[arg-type]
    assert_back_as_before(world, old_pid, restarted_ok=touched_the_old_server(plan, step))


@pytest.mark.parametrize("plan", ["restart", "blue-green"])
def test_every_revert_point_killed_is_finished_by_the_next_recovery(world: World, plan: str) -> None:
    for point in PLANS[plan].revert_points():
        last = PLANS[plan].names[-1]
        with pytest.raises(SimulatedKill):  # fail at the last step, then die at `point` while reverting
            world.switcher(Killing(last, point)).switch("new", strategy_of(plan))  # type: ignore[arg-type]
        assert world.intent() is not None, point
        world.switcher().recover()
        assert world.pointer() == "blue" and world.blue.read_text() == unit_text("old"), point
        world.assert_one_server_named_by_the_pointer()
        assert world.intent() is None and not world.green.exists(), point


@pytest.mark.parametrize("plan", ["restart", "blue-green"])
def test_a_switch_passes_each_fault_point_of_its_plan_in_order(world: World, plan: str) -> None:
    fault = FaultAt()
    world.switcher(fault).switch("new", strategy_of(plan))  # type: ignore[arg-type]
    assert fault.seen == list(fault_points(plan))


@pytest.mark.parametrize("plan", ["restart", "blue-green"])
def test_a_full_revert_passes_every_revert_point_its_plan_names(world: World, plan: str) -> None:
    last = PLANS[plan].names[-1]
    seen: list[str] = []

    def fault(step: str) -> None:
        seen.append(step)
        if step == last:
            raise InjectedBug(f"a bug at {step}")

    with pytest.raises(SwitchFailed):
        world.switcher(fault).switch("new", strategy_of(plan))  # type: ignore[arg-type]
    assert seen[seen.index(last) + 1:] == list(PLANS[plan].revert_points())


def fail_a_restart_to_new(world: World, how: str, *, says: str, kill_at: str) -> None:
    """A restart switch to "new" whose gate fails (the revert must say `says`), or killed at `kill_at`
    and then recovered."""
    if how == "exception":
        world.gate.failures.append(InjectedBug("never healthy"))
        with pytest.raises(SwitchFailed, match=says):
            world.switcher().switch("new", "restart")
        return
    with pytest.raises(SimulatedKill):
        world.switcher(FaultAt(kill_at)).switch("new", "restart")
    assert world.switcher().recover() is not None


@pytest.mark.parametrize("how", ["exception", "kill"])
def test_a_first_switch_that_fails_removes_its_unit_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         how: str) -> None:
    world = make_world(tmp_path, monkeypatch, first=None)
    fail_a_restart_to_new(world, how, says="was removed again", kill_at="gate")
    assert not world.blue.exists() and world.systemd.running() == [] and world.intent() is None


@pytest.mark.parametrize("how", ["exception", "kill"])
def test_a_failed_switch_of_a_stopped_server_leaves_it_stopped_on_its_old_unit(world: World, how: str) -> None:
    world.systemd.stop(UNIT)
    fail_a_restart_to_new(world, how, says="back on old .stopped, as it was.", kill_at="restart")
    assert world.blue.read_text() == unit_text("old") and world.systemd.running() == []
    assert world.intent() is None


@pytest.mark.parametrize("plan", ["restart", "blue-green"])
def test_the_revert_gates_the_old_server_by_its_own_unit(world: World, plan: str) -> None:
    keyed = unit_text("old").replace('"8081"', '"8081" "--api-key" "sk-old"')
    world.blue.write_text(keyed)  # the old unit, as a hand edit: its own key
    world.switcher().record_external_edit()
    last = "gate" if plan == "restart" else "stop-old"
    with pytest.raises(SwitchFailed):
        world.switcher(FaultAt(last, InjectedBug("bug"))).switch("new", strategy_of(plan))  # type: ignore[arg-type]
    revert_gate = world.gate.asked[-1]
    assert {k: revert_gate[k] for k in ("base_url", "alias", "unit", "api_key")} == \
        {"base_url": "http://127.0.0.1:8081", "alias": "tiny", "unit": UNIT, "api_key": "sk-old"}
    assert revert_gate["timeout_s"] > 0 and 0 <= revert_gate["stability_s"] <= 2.0
    assert world.blue.read_text() == keyed


def test_a_revert_finds_the_old_unit_in_its_backup_when_the_unit_store_lost_it(world: World) -> None:
    with pytest.raises(SimulatedKill):
        world.switcher(FaultAt("restart")).switch("new", "restart")
    for stored in (world.state.unit_store(world.deployment.name)).glob("*"):
        if stored.read_text() == unit_text("old"):
            stored.unlink()
    world.switcher().recover()
    assert world.blue.read_text() == unit_text("old") and world.intent() is None


def test_an_old_server_that_died_during_an_interrupted_switch_is_brought_back(world: World) -> None:
    with pytest.raises(SimulatedKill):
        world.switcher(FaultAt("reload")).switch("new", "restart")  # before the restart began
    world.systemd.stop(UNIT)  # and the old server died on its own meanwhile
    said = world.switcher().recover()
    assert said is not None and "healthy again" in said
    assert world.systemd.running() == [UNIT] and world.blue.read_text() == unit_text("old")


def test_a_revert_reloads_systemd_once_after_the_file_is_back_and_before_the_restart(world: World) -> None:
    with pytest.raises(SwitchFailed):
        world.switcher(FaultAt("gate", InjectedBug("bug"))).switch("new", "restart")
    calls = world.systemd.calls
    reverting = calls[calls.index(("restart", UNIT)) + 1:]  # after the switch's own restart
    assert reverting.count(("reload", "")) == 1
    assert reverting.index(("reload", "")) < reverting.index(("restart", UNIT))


class Killing:
    """Raises a bug at step `fail`, then kills the revert at `point`."""

    def __init__(self, fail: str, point: str) -> None:
        self.fail, self.point = fail, point

    def __call__(self, step: str) -> None:
        if step == self.fail:
            raise InjectedBug(f"a bug at {step}")
        if step == self.point:
            raise SimulatedKill()


def test_a_restart_runs_inside_the_proxys_drain_and_blue_green_drains_nothing(world: World) -> None:
    @contextmanager
    def drained(unit: str) -> Iterator[None]:
        world.systemd.calls.append(("drain", unit))
        try:
            yield
        finally:
            world.systemd.calls.append(("resume", unit))

    world.proxy.drained = drained  # type: ignore[method-assign]
    world.switcher().switch("new", "restart")
    around = world.systemd.calls[world.systemd.calls.index(("drain", UNIT)):]
    assert around[:3] == [("drain", UNIT), ("restart", UNIT), ("resume", UNIT)]
    world.systemd.calls.clear()
    world.switcher().switch("third", "blue-green")  # the free slot serves nobody; the old one no longer
    assert world.systemd.running() == [GREEN] and not any(call[0] == "drain" for call in world.systemd.calls)


# ---- the shadow bench's candidate ---------------------------------------------------------------


def candidate_target() -> Target:
    return Target(unit_text("new", 8082), "new", "tiny", "http://127.0.0.1:8082", 5.0, 0.0)


def assert_free_slot_as_before(world: World, green_before: str | None) -> None:
    assert (world.green.read_text() if world.green.exists() else None) == green_before
    world.assert_one_server_named_by_the_pointer()
    assert not world.state.candidate_intent(UNIT).exists()


@pytest.fixture(params=[None, unit_text("third", 8082)], ids=["no-green-file", "green-file"])
def green_before(request: pytest.FixtureRequest, world: World) -> Iterator[str | None]:
    if request.param is not None:
        world.green.write_text(request.param)
    yield request.param


def test_a_candidate_runs_beside_the_live_server_until_stopped(world: World, green_before: str | None) -> None:
    live_pid = world.serving_pid()
    with world.seams().lock("test"):
        candidate = start_candidate(world.seams(), candidate_target(), gate=world.gate, fault=FaultAt())
    assert world.systemd.running() == [GREEN, UNIT] and world.pointer() == "blue"
    assert world.green.read_text() == unit_text("new", 8082) and world.gate.gated == ["http://127.0.0.1:8082"]
    record = json.loads(world.state.candidate_intent(UNIT).read_text())
    assert record["done"] == list(PLANS["shadow"].names) and world.intent() is None  # a switch's record stays free
    assert {k: record[k] for k in ("unit", "kind", "profile", "old_profile", "old_slot", "slot")} == \
        {"unit": UNIT, "kind": "shadow", "profile": "new", "old_profile": "old", "old_slot": "blue", "slot": "green"}
    assert candidate.stop() is not None and candidate.stop() is None  # once
    assert_free_slot_as_before(world, green_before)
    assert world.serving_pid() == live_pid


@pytest.mark.parametrize("step", SHADOW)
@pytest.mark.parametrize("inside", [True, False], ids=["inside", "after"])
def test_a_candidate_that_fails_at_any_step_is_stopped_at_once(world: World, green_before: str | None,
                                                              monkeypatch: pytest.MonkeyPatch, step: str,
                                                              inside: bool) -> None:
    fault = FaultAt(step, InjectedBug("bug")) if not inside else FaultAt()
    if inside:
        monkeypatch.setitem(PLANS, "shadow", failing_after_action(PLANS["shadow"], step, InjectedBug("bug")))
    with pytest.raises(InjectedBug):
        start_candidate(world.seams(), candidate_target(), gate=world.gate, fault=fault)
    assert_free_slot_as_before(world, green_before)


@pytest.mark.parametrize("step", SHADOW)
@pytest.mark.parametrize("inside", [True, False], ids=["inside", "after"])
def test_a_bench_killed_at_any_step_is_undone_by_the_next_switch(world: World, green_before: str | None,
                                                                monkeypatch: pytest.MonkeyPatch, step: str,
                                                                inside: bool) -> None:
    fault = FaultAt(step) if not inside else FaultAt()
    with monkeypatch.context() as patch:
        if inside:
            patch.setitem(PLANS, "shadow", failing_after_action(PLANS["shadow"], step, SimulatedKill()))
        with pytest.raises(SimulatedKill):
            start_candidate(world.seams(), candidate_target(), gate=world.gate, fault=fault)
    assert world.state.candidate_intent(UNIT).exists()
    assert world.switcher().switch("third", "restart").generation.outcome == "ok"  # recovers first
    assert (world.green.read_text() if world.green.exists() else None) == green_before
    assert world.systemd.running() == [UNIT] and not world.state.candidate_intent(UNIT).exists()


def test_a_killed_candidate_is_told_apart_from_an_interrupted_switch(world: World) -> None:
    with pytest.raises(SimulatedKill):
        start_candidate(world.seams(), candidate_target(), gate=world.gate, fault=FaultAt("gate"))
    assert world.switcher().pending_intent() is None  # `specd status` reports no interrupted switch
    said = recover_candidate(world.seams(), gate=world.gate, fault=FaultAt())
    assert said is not None and "shadow bench was interrupted" in said and GREEN in said
    assert recover_candidate(world.seams(), gate=world.gate, fault=FaultAt()) is None


def test_when_green_serves_a_candidate_runs_in_blue(world: World) -> None:
    world.switcher().switch("new", "blue-green")
    green_pid, blue_before = world.serving_pid(), world.blue.read_text()
    target = replace(candidate_target(), text=unit_text("third"), base_url="http://127.0.0.1:8081")
    candidate = start_candidate(world.seams(), target, gate=world.gate, fault=FaultAt())
    assert world.blue.read_text() == unit_text("third") and world.systemd.running() == [GREEN, UNIT]
    candidate.stop()
    assert world.blue.read_text() == blue_before and world.systemd.running() == [GREEN]
    assert world.pointer() == "green" and world.serving_pid() == green_pid


@pytest.mark.parametrize("step", ["flip", "drain", "stop-old", "enable"])
def test_a_failed_switch_out_of_green_gives_green_back(world: World, step: str) -> None:
    world.switcher().switch("new", "blue-green")
    with pytest.raises(SwitchFailed):
        world.switcher(FaultAt(step, InjectedBug("bug"))).switch("third", "blue-green")
    assert world.pointer() == "green" and world.green.read_text() == unit_text("new", 8082)
    world.assert_one_server_named_by_the_pointer()
    assert world.proxy.followed[-1] == "green"


def test_an_old_unit_edited_mid_switch_is_not_brought_back_blindly(world: World) -> None:
    with pytest.raises(SimulatedKill):
        world.switcher(FaultAt("stop-old")).switch("new", "blue-green")
    world.blue.write_text(unit_text("old") + "# edited by hand while the switch was down\n")
    said = world.switcher().recover()
    assert said is not None and "cannot bring back" in said and "not the one that served" in said
    assert world.history.list(UNIT, limit=1)[0].outcome == "failed" and world.intent() is None


# ---- the plans themselves -----------------------------------------------------------------------


@pytest.mark.parametrize("plan", list(PLANS))
def test_every_step_that_changes_the_box_has_an_undo(plan: str) -> None:
    for step in PLANS[plan].steps:
        harmless = set(step.touches) <= {"nothing", "backup file", "service manager"}
        assert harmless or step.undo is not None, f"{plan}: {step.name} touches {step.touches} and has no undo"
    assert len(set(PLANS[plan].names)) == len(PLANS[plan].steps)


# ---- an intent written by specd before the engine -----------------------------------------------


def flat_intent(world: World, step: str, switcher: Switcher) -> dict[str, object]:
    """The record the flat Intent of the previous specd wrote at `step` of a restart to "new"."""
    generation = world.history.list(UNIT, limit=1)[0]
    old_text = unit_text("old")
    return {"unit": UNIT, "unit_path": str(world.blue), "generation_id": generation.id, "profile": "new",
            "kind": "switch", "old_existed": True, "old_active": True,
            "old_sha256": switcher.store.put(old_text), "old_profile": "old", "backup_path": None,
            "new_sha256": switcher.store.put(unit_text("new")), "step": step, "old_main_pid": 0,
            "strategy": "restart", "slot": "blue", "old_slot": "blue", "slot_old_sha256": None,
            "old_enabled": False}


@pytest.mark.parametrize("step", ["intent", "write", "restart", "gate"])
def test_a_flat_intent_of_the_previous_specd_is_recovered(world: World, step: str) -> None:
    with pytest.raises(SimulatedKill):  # leaves a half-done switch to "new" in the blue slot
        world.switcher(FaultAt(step)).switch("new", "restart")
    switcher = world.switcher()
    path = world.state.intent(UNIT)
    path.write_text(json.dumps(flat_intent(world, step, switcher)))
    loaded = intents.load(path)
    assert loaded is not None and loaded.step == step and loaded.value("restart", "active") is True
    switcher.recover()
    assert world.blue.read_text() == unit_text("old") and world.intent() is None
    assert world.history.list(UNIT, limit=1)[0].outcome == "reverted"


@pytest.mark.parametrize("step", ["write", "gate", "flip", "stop-old", "enable"])
def test_a_flat_blue_green_intent_of_the_previous_specd_is_recovered(world: World, step: str) -> None:
    old_pid = world.serving_pid()
    with pytest.raises(SimulatedKill):
        world.switcher(FaultAt(step)).switch("new", "blue-green")
    switcher = world.switcher()
    flat = {**flat_intent(world, step, switcher), "unit_path": str(world.green), "strategy": "blue-green",
            "slot": "green", "old_slot": "blue", "old_main_pid": old_pid, "old_enabled": True,
            "new_sha256": switcher.store.put(unit_text("new", 8082))}
    world.state.intent(UNIT).write_text(json.dumps(flat))
    loaded = intents.load(world.state.intent(UNIT))
    assert loaded is not None and loaded.strategy == "blue-green" and loaded.value("stop-old", "main_pid") == old_pid
    switcher.recover()
    assert_back_as_before(world, old_pid, restarted_ok=step in ("stop-old", "enable"))


def test_an_unreadable_intent_is_set_aside_not_acted_on(world: World) -> None:
    path = world.state.intent(UNIT)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"unit": "x"}')
    assert intents.load(path) is None and path.with_suffix(".corrupt").exists()


def test_a_hand_edit_is_recorded_even_when_the_unit_store_lost_the_text_it_replaced(world: World) -> None:
    for stored in (world.state.unit_store(world.deployment.name)).glob("*"):
        stored.unlink()  # the store lost the active generation's text: no backup of it can be written
    world.blue.write_text(unit_text("old") + "Environment=EDITED=1\n")
    world.switcher().switch("new", "restart")
    edit = world.history.list(UNIT)[1]
    assert (edit.kind, edit.backup_path) == ("external-edit", None)


def test_a_candidate_already_undone_by_a_switch_s_recovery_stops_quietly(world: World) -> None:
    """The bench holds the lock only around start and stop: a switch between them recovers the candidate."""
    with world.seams().lock("bench"):
        candidate = start_candidate(world.seams(), candidate_target(), gate=world.gate, fault=FaultAt())
    assert recover_candidate(world.seams(), gate=world.gate, fault=FaultAt()) is not None
    candidate.stop()
    assert world.systemd.running() == [UNIT] and not world.state.candidate_intent(UNIT).exists()
