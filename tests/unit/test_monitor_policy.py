"""The health monitor's policy (pure): it always ends in a healthy endpoint or a clear alarm."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from specd.daemon.monitor import MAX_ATTEMPTS, Episode, decide, owner_stopped
from specd.deploy.history import Generation
from specd.deploy.systemd import UnitState

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def generation(age_s: float, *, trigger: str = "cli", previous: int | None = 1) -> Generation:
    return Generation(id=2, unit="u.service", created_at=(NOW - timedelta(seconds=age_s)).isoformat(),
                      kind="switch", profile="mtp", unit_sha256="x", backup_path=None, previous_id=previous,
                      restores_id=None, trigger=trigger, outcome="ok", detail="", preflight_s=None, restart_s=None,
                      health_s=None, total_s=None)


def test_a_failure_soon_after_a_switch_rolls_back_once_then_restarts() -> None:
    episode = Episode()
    assert decide(2, 2, generation(30), 600, NOW, episode) == "rollback"
    episode.rolled_back = True  # the rollback was tried (and failed, or did not help)
    assert decide(2, 2, generation(30), 600, NOW, episode) == "restart"


def test_nothing_to_roll_back_to_means_restart() -> None:
    assert decide(2, 2, generation(30, previous=None), 600, NOW) == "restart"
    assert decide(2, 2, None, 600, NOW) == "restart"
    assert decide(2, 2, generation(30, trigger="daemon"), 600, NOW) == "restart"  # never walk back twice


def test_after_repeated_failed_attempts_it_gives_up_once_and_stays_quiet() -> None:
    episode = Episode(attempts=MAX_ATTEMPTS)
    assert decide(2, 2, generation(7200), 600, NOW, episode) == "give-up"
    episode.alarmed = True
    assert decide(5, 2, generation(7200), 600, NOW, episode) == "alarmed"


def test_below_the_threshold_it_waits_and_healthy_is_nothing() -> None:
    assert decide(1, 2, generation(30), 600, NOW) == "wait"
    assert decide(0, 2, generation(30), 600, NOW, Episode(attempts=MAX_ATTEMPTS, alarmed=True)) == "none"


def state(active: str, result: str) -> UnitState:
    return UnitState("u.service", "loaded", active, "dead", result, 0, 0, 0, "")


def test_a_clean_stop_is_the_owners_and_a_crash_is_not() -> None:
    assert owner_stopped(state("inactive", "success"))
    assert not owner_stopped(state("failed", "signal"))
    assert not owner_stopped(state("activating", "exit-code"))
    assert not owner_stopped(state("active", "success"))


def test_the_policy_waits_restarts_or_rolls_back() -> None:
    """(moved from the system tier: pure)"""
    fresh, old = generation(30), generation(2 * 3600)
    assert decide(0, 3, fresh, 600, NOW) == "none"
    assert decide(2, 3, fresh, 600, NOW) == "wait"
    assert decide(3, 3, fresh, 600, NOW) == "rollback"  # failing right after a switch: the switch did it
    assert decide(3, 3, old, 600, NOW) == "restart"
    assert decide(3, 3, None, 600, NOW) == "restart"
    assert decide(3, 3, generation(0, previous=None), 600, NOW) == "restart"  # nothing to roll back to
    assert decide(3, 3, generation(0, trigger="daemon"), 600, NOW) == "restart"  # never walk back twice
