"""Batch-size-aware choice: the best profile per concurrency level, and the single one that loses least."""

from __future__ import annotations

import pytest

from specd.emulator.model import load_model
from specd.errors import UsageError
from specd.tune.bench import ModelTarget, Settings
from specd.tune.levels import bench_levels, levels_of, parse_levels, plan_levels
from specd.tune.workloads import Workload, WorkloadRequest, filler_text


def test_the_single_choice_is_the_least_share_weighted_regret_not_the_winner_of_the_busiest_level() -> None:
    medians = {1: {"plain": 1000.0, "mtp": 600.0}, 8: {"plain": 2000.0, "mtp": 3000.0}}

    plan = plan_levels(medians, {1: 0.7, 8: 0.3})

    assert [(c.level, c.best) for c in plan.levels] == [(1, "mtp"), (8, "plain")]
    assert plan.regret["plain"] == pytest.approx(0.7 * (1000 / 600 - 1))  # 46.7% slower, mostly single-stream
    assert plan.regret["mtp"] == pytest.approx(0.3 * (3000 / 2000 - 1))  # 15%: slower only when busy
    assert plan.single == "mtp" and not plan.one_profile_wins_everywhere
    assert "mtp at 1 in flight, plain at 8 in flight" in plan.sentence() and "mtp loses least (15.0%" in plan.sentence()
    busy = plan_levels(medians, {1: 0.2, 8: 0.8})  # the same speeds, traffic mostly batched
    assert busy.single == "plain"


def test_one_profile_fastest_everywhere_is_said_plainly() -> None:
    plan = plan_levels({1: {"plain": 900.0, "mtp": 600.0}, 4: {"plain": 1500.0, "mtp": 1400.0}}, {1: 0.5, 4: 0.5})
    assert plan.single == "mtp" and plan.regret["mtp"] == 0.0
    assert plan.sentence() == "mtp is the fastest at every level benched: one profile serves all of it"


def test_levels_come_from_the_traffic_the_most_common_first() -> None:
    assert levels_of({"1": 50, "2": 10, "8": 40, "4": 5}) == {1: 0.5, 2: 0.1, 8: 0.4}
    assert parse_levels("8,1,4,1") == {1: 1 / 3, 4: 1 / 3, 8: 1 / 3}
    with pytest.raises(UsageError, match=r"--levels 1,x: expected concurrency levels as integers"):
        parse_levels("1,x")
    with pytest.raises(UsageError, match="at least 1"):
        parse_levels("0,4")
    with pytest.raises(UsageError, match="no concurrency levels"):
        levels_of({})


def test_on_the_emulator_speculation_wins_alone_loses_batched_and_the_box_ends_where_it_began() -> None:
    """The emulator's performance model (the seeds' 3090 Ti tables): MTP wins one stream at a time and
    loses at 8 in flight; which single choice loses least follows the traffic's mix."""
    code = Workload("code", tuple(WorkloadRequest(body={"messages": [
        {"role": "system", "content": f"Reference material:\n{filler_text(500, seed)}"},
        {"role": "user", "content": "Write a Python function that parses these ledger entries."}],
        "max_tokens": 256}, task_class="code") for seed in range(4)))
    target = ModelTarget(load_model(), {"plain": "none", "mtp": "mtp"}, seed=1, active="plain")

    plan = bench_levels(target, ["plain", "mtp"], code, Settings(n=10), {1: 0.5, 8: 0.5})

    assert [(c.level, c.best) for c in plan.levels] == [(1, "mtp"), (8, "plain")]
    assert target.active() == "plain"
