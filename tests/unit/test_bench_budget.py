"""A night's bench stays within its time budget: what the CI box showed (a nightly sweep's bench ran 321 s
of a 300 s budget) asserted on the emulator's model, each step taking time on a fake clock.

The fakes are the clock and, where a step fails, a box that never gets quiet: a real server cannot be
made to take 25 s for its warm-up or to fail at a chosen moment, nor a real box to stay busy, on demand.
Each case asserts what the user relies on: when the bench returns, a switch back to the live profile
still ends by the deadline.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from specd.emulator.model import load_model
from specd.errors import HealthError
from specd.tune.bench import Settings, bench_profiles
from specd.tune.noise import BoxLoad
from specd.tune.targets import ModelTarget, Reply
from specd.tune.workloads import load_workload


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class ModelTargetOnFakeClock(ModelTarget):
    """The emulator's model answering; every switch, warm-up and request advances the fake clock."""

    cheap_switches = False  # a restart per switch, as on a real server

    def __init__(self, clock: FakeClock, *, switch_s: float, warmup_s: float, request_s: float,
                 fail_once_after: float | None = None) -> None:
        super().__init__(load_model(), {"plain": "none", "ngram": "ngram", "mtp": "mtp"}, active="plain")
        self.clock, self.switch_s, self.warmup_s, self.request_s = clock, switch_s, warmup_s, request_s
        self.fail_once_after = fail_once_after
        self.requests = 0

    def activate(self, profile: str) -> None:
        self.clock.now += self.switch_s
        super().activate(profile)

    def complete(self, body: Mapping[str, Any], in_flight: int = 1) -> Reply:
        warmup = body["max_tokens"] == 16 and body["messages"][0]["content"].startswith("Warm-up")
        self.clock.now += self.warmup_s if warmup else self.request_s
        if self.fail_once_after is not None and self.clock.now > self.fail_once_after:
            self.fail_once_after = None
            raise HealthError("the server stopped answering (injected)")
        self.requests += 1
        return super().complete(body, in_flight)


class FakeAlwaysBusyBox(BoxLoad):
    """A box that never gets quiet: a wait for a quieter moment lasts its whole limit, on the fake clock."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(Path("/nonexistent/pressure"), clock=clock)
        self.fake_clock = clock

    def wait_quiet(self, limit_s: float, sleep: Any = None) -> float:
        self.fake_clock.now += max(limit_s, 0.0)
        return max(limit_s, 0.0)


def bench_to_the_budget(target: ModelTargetOnFakeClock, clock: FakeClock, budget_s: float) -> tuple[Any, float]:
    deadline = clock.now + budget_s
    settings = Settings(n=400, early_stop=False, per_round=4, deadline=deadline)  # only the budget ends it
    report = bench_profiles(target, ["plain", "ngram", "mtp"], load_workload("code"), settings,
                            meter=FakeAlwaysBusyBox(clock), clock=clock)
    return report, deadline


@pytest.mark.parametrize(("switch_s", "warmup_s", "request_s"), [(10.0, 25.0, 4.0), (2.0, 1.0, 9.0), (30.0, 0.5, 1.0)],
                         ids=["slow-warm-up", "slow-requests", "slow-switches"])
def test_the_bench_ends_in_time_for_the_way_back(switch_s: float, warmup_s: float, request_s: float) -> None:
    clock = FakeClock()
    target = ModelTargetOnFakeClock(clock, switch_s=switch_s, warmup_s=warmup_s, request_s=request_s)
    report, deadline = bench_to_the_budget(target, clock, budget_s=300.0)
    assert report.stop_reason.startswith("the time budget was spent"), report.stop_reason
    assert target.requests >= 6 and report.benched() == ["plain", "ngram", "mtp"], "the budget held some rounds"
    assert clock.now + switch_s <= deadline, (clock.now - deadline, report.notes)
    assert report.elapsed_s + switch_s <= 300.0


def test_a_step_failing_near_the_end_is_not_retried_past_the_deadline() -> None:
    clock = FakeClock()
    target = ModelTargetOnFakeClock(clock, switch_s=10.0, warmup_s=2.0, request_s=5.0,
                                    fail_once_after=clock.now + 250.0)
    report, deadline = bench_to_the_budget(target, clock, budget_s=300.0)
    assert target.fail_once_after is None, "the failure was injected"
    assert clock.now + 10.0 <= deadline, (clock.now - deadline, report.notes)
    assert any("injected" in note for note in report.notes), report.notes


def test_a_step_failing_early_is_retried_and_the_bench_goes_on() -> None:
    clock = FakeClock()
    target = ModelTargetOnFakeClock(clock, switch_s=10.0, warmup_s=2.0, request_s=5.0,
                                    fail_once_after=clock.now + 40.0)
    report, _ = bench_to_the_budget(target, clock, budget_s=300.0)
    assert any("tried again" in note for note in report.notes), report.notes
    assert report.benched() == ["plain", "ngram", "mtp"] and not report.failed
