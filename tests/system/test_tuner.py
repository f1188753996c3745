"""The tuner: the seeds' decisions on the emulator, sequential sampling, pins, dry runs (the pure decision is
tests/unit/test_paired_decision.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specd.tune.bench import ModelTarget, Settings
from specd.tune.tuner import tune
from specd.tune.workloads import save_workload
from tests.conftest import Box
from tests.system.test_bench import CODE_ASK, CREATIVE_ASK, SEEDS, emulated_profiles, shaped

MODES = {"plain": "none", "mtp": "mtp", "dflash": "dflash"}


# --- tune over the seeds' performance model, in-process (no server) ---------------------------------


@pytest.mark.parametrize(("ask", "prompt", "output", "candidates", "winner"), [
    (CODE_ASK, 43000, 200, MODES, "plain"),       # 002: plain wins below ~950 output tokens at 43K context
    (CODE_ASK, 43000, 2000, MODES, "mtp"),        # ... MTP above, DFlash loses
    (CODE_ASK, 500, 256, ("plain", "mtp"), "mtp"),          # 004: MTP on for code
    (CREATIVE_ASK, 500, 256, ("plain", "mtp"), "plain"),    # ... off for creative at Q4_K_M
])
def test_tune_reproduces_the_seeds_decisions_on_the_model(ask: str, prompt: int, output: int,
                                                          candidates: tuple[str, ...], winner: str) -> None:
    target = ModelTarget(SEEDS, MODES, seed=1, active="plain")
    result = tune(target, list(candidates), shaped(ask, prompt, output), Settings(n=10))
    assert result.decision.best == winner
    assert result.final_profile == winner
    assert result.decision.switch == (winner != "plain")
    if output == 2000:  # 002: DFlash collapses at long outputs and loses to both
        medians = {e.profile: e.median_ms for e in result.decision.estimates}
        assert medians["dflash"] > medians["mtp"]


def test_identical_profiles_never_switch_on_noise() -> None:
    for seed in range(20):
        target = ModelTarget(SEEDS, {"a": "none", "b": "none"}, seed=seed, active="a")
        result = tune(target, ["a", "b"], shaped(CODE_ASK, 500, 256), Settings(n=10))
        assert not result.decision.switch, result.decision.reason
        assert target.active() == "a"


def test_a_decided_candidate_leaves_at_the_first_look_and_an_undecided_one_is_sampled_on() -> None:
    target = ModelTarget(SEEDS, MODES, seed=1, active="plain")
    result = tune(target, list(MODES), shaped(CODE_ASK, 8192, 1000), Settings(n=10))
    decision = result.decision
    assert decision.switch and decision.best == "mtp" and decision.outcome == "switch"
    assert decision.samples["mtp"] == 5 and decision.samples["dflash"] > 5  # mtp was clear at the floor
    assert decision.samples["plain"] == decision.samples["dflash"]  # the incumbent runs while anyone does
    assert decision.stopped.startswith("every candidate was decided at look")
    assert result.report.left["mtp"].startswith("decided (faster) at look 1 of 7")  # 5, 10, 20, ... 320


def test_mixed_lengths_give_a_crossover_sentence() -> None:
    target = ModelTarget(SEEDS, MODES, seed=2, active="plain")
    mixed = shaped(CODE_ASK, 43000, 200, count=3)
    mixed = type(mixed)("mixed", mixed.requests + shaped(CODE_ASK, 43000, 2000, count=3).requests)
    result = tune(target, ["plain", "mtp"], mixed, Settings(n=12))
    assert any("wins below" in s and "output tokens" in s for s in result.decision.crossovers)
    assert sorted(e.profile for e in result.decision.estimates) == ["mtp", "plain"]
    assert all(e.model_wall_ms is not None for e in result.decision.estimates)


# --- end to end: specd tune on specd-emulator units ------------------------------------------------


def _tune(box: Box, workload: Path, *extra: str) -> dict[str, object]:
    result = box.specd("tune", "--workload", str(workload), "--n", "6", "--json", *extra, check=True, timeout=900)
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def _active(box: Box) -> str:
    return str(json.loads(box.specd("status", "--json", check=True).stdout)["active_profile"])


@pytest.mark.timeout(1200)  # sequential sampling may take up to 32 x n requests per profile (emulated: fast)
def test_tune_cli_follows_the_task_class_and_respects_dry_run_and_pins(box: Box, tmp_path: Path) -> None:
    emulated_profiles(box, ("plain", "mtp"))
    box.specd("switch", "plain", check=True)
    code = tmp_path / "code.jsonl"
    creative = tmp_path / "creative.jsonl"
    save_workload(shaped(CODE_ASK, 500, 256), code)
    save_workload(shaped(CREATIVE_ASK, 500, 256), creative)

    dry = _tune(box, code, "--dry-run")
    assert dry["best"] == "mtp" and dry["switch"] is False and dry["final_profile"] == "plain"
    assert dry["traffic"]["source"] == "file" and dry["traffic"]["size"] == 4 and dry["traffic"]["concurrency"] == 1
    assert _active(box) == "plain"

    box.specd("pin", "plain", check=True)
    pinned = _tune(box, code)
    assert pinned["best"] == "mtp" and pinned["switch"] is False and "pinned" in str(pinned["reason"])
    assert _active(box) == "plain"
    box.specd("unpin", check=True)

    on_code = _tune(box, code)
    assert on_code["best"] == "mtp" and on_code["switch"] is True and _active(box) == "mtp"
    estimates = on_code["estimates"]
    assert isinstance(estimates, dict) and set(estimates) == {"plain", "mtp"}
    on_creative = _tune(box, creative)
    assert on_creative["best"] == "plain" and on_creative["switch"] is True and _active(box) == "plain"
    events = box.history().events(box.unit)
    assert [e["kind"] for e in events[:4]] == ["tune", "tune", "tune", "tune-dry-run"]
    assert events[0]["detail"].startswith("switched to plain")


@pytest.mark.timeout(1200)  # sequential sampling may take up to 32 x n requests per profile (emulated: fast)
def test_tune_cli_output_length_crossover(box: Box, tmp_path: Path) -> None:
    emulated_profiles(box, ("plain", "mtp", "dflash"), time_scale=0.005)
    box.specd("switch", "plain", check=True)
    short, long = tmp_path / "short.jsonl", tmp_path / "long.jsonl"
    save_workload(shaped(CODE_ASK, 43000, 200, count=3), short)
    save_workload(shaped(CODE_ASK, 43000, 2000, count=3), long)
    kept = _tune(box, short)
    assert kept["best"] == "plain" and kept["switch"] is False
    switched = _tune(box, long)
    assert switched["best"] == "mtp" and switched["switch"] is True and _active(box) == "mtp", switched
    medians = {k: v["median_ms"] for k, v in switched["estimates"].items()}  # type: ignore[attr-defined]
    assert medians["dflash"] > medians["mtp"]


def test_tune_cli_identical_profiles_do_not_switch(box: Box, tmp_path: Path) -> None:
    emulated_profiles(box, ("plain",), twins=("plain-twin",))
    box.edit_profile("plain-twin", args=["--emulator-time-scale", "0.005", "--seed", "7"])  # same speed, other noise
    box.specd("switch", "plain", check=True)
    code = tmp_path / "code.jsonl"
    save_workload(shaped(CODE_ASK, 500, 256), code)
    result = _tune(box, code)
    assert result["switch"] is False and _active(box) == "plain"
