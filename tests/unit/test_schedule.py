"""Time-of-day pins: what a user relies on is that the box is on the pinned profile while a pinned
period lasts, back on the profile chosen outside the schedule when it ends, that a switch made by
hand inside a period stands, and that the schedule never starts a server its owner stopped.

The pure rules (`next_move`, `chosen_outside`, `schedule_of`) are checked case by case; the job runs
over the blue-green tests' fake seams (FakeSlotsSystemd, FakeGate) with a clock the test moves across
period boundaries, and real files: unit, slot pointer, history and pin tables in a tmp dir.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from specd.deploy.history import Generation, GenerationOutcome, History, Trigger
from specd.deploy.slots import serving_slot
from specd.errors import ProfileError
from specd.tune.levels import LevelChoice, LevelPlan, schedule_of
from specd.tune.pins import (
    clear_period_pins,
    get_pin,
    period_pins,
    pin_in_force,
    set_period_pin,
    set_pin,
)
from specd.tune.schedule import Move, ScheduleJob, Seen, chosen_outside, next_move
from tests.fakes.switch_world import UNIT, World, make_world


def local(hour: int, minute: int = 0) -> float:
    """A unix time at `hour`:`minute` local time (the periods are local time of day)."""
    return time.mktime((2026, 11, 24, hour, minute, 0, 0, 0, -1))


@dataclass
class WallClock:
    at: float

    def time(self) -> float:
        return self.at

    def monotonic(self) -> float:
        return self.at

    def sleep(self, seconds: float) -> None:
        self.at += seconds


# ---- the rules ------------------------------------------------------------------------------------

def test_entering_a_pinned_period_moves_to_its_profile_unless_already_there() -> None:
    assert next_move(Seen("afternoon", "plain"), Seen("morning", None), "mtp", "mtp") == \
        Move("plain", "the afternoon pin")
    assert next_move(Seen("afternoon", "plain"), Seen("morning", None), "plain", "mtp") is None


def test_a_daemon_started_inside_a_pinned_period_applies_it() -> None:
    assert next_move(Seen("evening", "plain"), None, "mtp", "mtp") == Move("plain", "the evening pin")
    assert next_move(Seen("evening", None), None, "mtp", "plain") is None  # unpinned: nothing to undo


def test_nothing_changed_means_no_move_even_when_the_box_was_moved_by_hand() -> None:
    assert next_move(Seen("afternoon", "plain"), Seen("afternoon", "plain"), "mtp", "mtp") is None


def test_leaving_a_pinned_period_returns_to_the_profile_chosen_outside_the_schedule() -> None:
    move = next_move(Seen("evening", None), Seen("afternoon", "plain"), "plain", "mtp")
    assert move is not None and move.profile == "mtp" and "afternoon pin ended" in move.reason
    removed = next_move(Seen("afternoon", None), Seen("afternoon", "plain"), "plain", "mtp")
    assert removed is not None and removed.profile == "mtp" and "was removed" in removed.reason


def test_leaving_a_period_does_not_undo_a_hand_switch_or_return_to_nothing() -> None:
    assert next_move(Seen("evening", None), Seen("afternoon", "plain"), "ngram", "mtp") is None  # moved by hand
    assert next_move(Seen("evening", None), Seen("afternoon", "plain"), "plain", None) is None  # nothing to return to
    assert next_move(Seen("evening", None), Seen("afternoon", "plain"), "plain", "plain") is None


def test_back_to_two_pinned_periods_in_a_row_moves_to_the_second() -> None:
    assert next_move(Seen("evening", "ngram"), Seen("afternoon", "plain"), "plain", "mtp") == \
        Move("ngram", "the evening pin")


def generation(gid: int, profile: str, trigger: Trigger, outcome: GenerationOutcome = "ok") -> Generation:
    return Generation(gid, UNIT, "2026-11-24T12:00:00+00:00", "switch", profile, None, None, None, None, trigger,
                      outcome, "", None, None, None, None)


def test_the_profile_chosen_outside_skips_the_schedule_benches_and_failed_switches() -> None:
    newest_first = [generation(6, "plain", "schedule"), generation(5, "x", "bench"), generation(4, "y", "verify"),
                    generation(3, "z", "cli", "reverted"), generation(2, "mtp", "tuner"), generation(1, "a", "cli")]
    assert chosen_outside(newest_first) == "mtp"
    assert chosen_outside([generation(1, "plain", "schedule")]) is None


def plan(best_by_level: dict[int, str]) -> LevelPlan:
    return LevelPlan(tuple(LevelChoice(level, 0.5, best, {best: 1.0}) for level, best in best_by_level.items()),
                     single=next(iter(best_by_level.values())), regret={})


def test_each_time_of_day_gets_the_best_profile_at_its_nearest_benched_level() -> None:
    schedule = schedule_of(plan({1: "mtp", 8: "plain"}), {"night": 1, "morning": 6, "afternoon": 9, "evening": 2})
    assert schedule == {"night": "mtp", "morning": "plain", "afternoon": "plain", "evening": "mtp"}
    assert list(schedule) == ["night", "morning", "afternoon", "evening"]  # the day's order
    assert schedule_of(plan({2: "mtp", 6: "plain"}), {"morning": 4, "evening": 6}) == \
        {"morning": "mtp", "evening": "plain"}  # 4 is as near 2 as 6: the lower level
    assert schedule_of(plan({1: "mtp", 8: "mtp"}), {"morning": 1, "evening": 8}) == {}  # one profile serves all


def test_pins_by_time_of_day_are_kept_per_unit_and_the_all_day_pin_comes_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    set_period_pin(UNIT, "evening", "plain")
    set_period_pin(UNIT, "morning", "mtp")
    set_period_pin("other.service", "morning", "ngram")
    assert {p: pin.profile for p, pin in period_pins(UNIT).items()} == {"morning": "mtp", "evening": "plain"}
    assert list(period_pins(UNIT)) == ["morning", "evening"]
    in_force = pin_in_force(UNIT, local(19, 30))
    assert in_force is not None and (in_force.profile, in_force.period) == ("plain", "evening")
    assert pin_in_force(UNIT, local(13)) is None
    set_pin(UNIT, "draft")
    in_force = pin_in_force(UNIT, local(19, 30))
    assert in_force is not None and (in_force.profile, in_force.period) == ("draft", None)
    assert set(clear_period_pins(UNIT, ("morning",))) == {"morning"}
    assert set(period_pins(UNIT)) == {"evening"} and set(period_pins("other.service")) == {"morning"}
    assert get_pin(UNIT) is not None


# ---- the daemon's job over fake seams -------------------------------------------------------------

@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    return make_world(tmp_path, monkeypatch)  # on profile "old", chosen at the command line


def job_for(world: World, clock: WallClock) -> ScheduleJob:
    return ScheduleJob(world.deployment, seams=lambda deployment: world.seams(History(world.state.db)), clock=clock,
                       switcher=lambda seams: world.switcher(seams=seams, trigger="schedule"))


def active(world: World) -> str | None:
    return world.switcher().active_profile()


def test_the_job_switches_when_a_pinned_period_begins_and_back_when_it_ends(world: World) -> None:
    set_period_pin(UNIT, "afternoon", "new")
    clock = WallClock(local(11, 58))
    job = job_for(world, clock)
    assert job() is None and active(world) == "old"
    clock.at = local(12, 0)
    move = job()
    assert move is not None and move.profile == "new" and active(world) == "new"
    assert job() is None  # a minute later: nothing changed
    newest = world.history.list(UNIT, limit=1)[0]
    assert (newest.profile, newest.trigger, newest.outcome) == ("new", "schedule", "ok")
    clock.at = local(18, 0)
    move = job()
    assert move is not None and move.profile == "old" and active(world) == "old"
    events = [(e["kind"], e["detail"]) for e in world.history.events(UNIT)]
    assert [kind for kind, _ in events[:2]] == ["schedule", "schedule"]
    assert "afternoon pin ended" in events[0][1] and "switched to old" in events[0][1]
    world.assert_one_server_named_by_the_pointer()


def test_a_hand_switch_inside_the_period_stands_until_the_next_change(world: World) -> None:
    set_period_pin(UNIT, "afternoon", "new")
    clock = WallClock(local(12, 5))
    job = job_for(world, clock)
    assert job() is not None and active(world) == "new"
    world.switcher().switch("third")  # the owner, at 15:00
    clock.at = local(15, 1)
    assert job() is None and active(world) == "third"
    clock.at = local(18, 0)
    assert job() is None and active(world) == "third"  # the period ended on the owner's choice: left alone


def test_removing_the_pin_in_force_returns_at_the_next_check(world: World) -> None:
    set_period_pin(UNIT, "night", "new")
    clock = WallClock(local(2))
    job = job_for(world, clock)
    assert job() is not None and active(world) == "new"
    clear_period_pins(UNIT, ("night",))
    move = job()
    assert move is not None and move.profile == "old" and "was removed" in move.reason


def test_the_schedule_starts_no_server_its_owner_stopped_and_moves_once_it_runs(world: World) -> None:
    set_period_pin(UNIT, "morning", "new")
    clock = WallClock(local(9))
    job = job_for(world, clock)
    serving = serving_slot(world.state, world.deployment).unit
    world.systemd.stop(serving)
    calls = len(world.systemd.calls)
    assert job() is None and world.systemd.running() == []
    assert world.systemd.calls[calls:] == []  # nothing was started, restarted or written
    world.systemd.restart(serving)  # the owner starts it again
    move = job()
    assert move is not None and active(world) == "new"


def test_an_all_day_pin_holds_the_schedule(world: World) -> None:
    set_period_pin(UNIT, "morning", "new")
    set_pin(UNIT, "old")
    clock = WallClock(local(9))
    job = job_for(world, clock)
    assert job() is None and active(world) == "old"


def test_a_failed_scheduled_switch_is_recorded_once_and_not_retried(world: World) -> None:
    set_period_pin(UNIT, "evening", "gone")  # no such profile (deleted after it was pinned)
    clock = WallClock(local(20))
    job = job_for(world, clock)
    with pytest.raises(ProfileError):
        job()
    events = [e for e in world.history.events(UNIT) if e["kind"] == "schedule-failed"]
    assert len(events) == 1 and "switching to gone failed" in events[0]["detail"]
    assert job() is None and active(world) == "old"
    assert len([e for e in world.history.events(UNIT) if e["kind"] == "schedule-failed"]) == 1
