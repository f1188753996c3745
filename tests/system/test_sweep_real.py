"""A sweep of the n-gram sizes on the real tiny llama-server, through `specd tune --sweep`.

Which size is fastest on this 2-core box is a measurement (benchmarks/results/sweep.md), not a
pass/fail fact. What a user relies on is asserted: the pick is at least as fast as the base by the
bench's own CI (the tuner only leaves the base for a variant whose CI is separated and faster), a
winner becomes a new profile file that keeps the base's comments, the base file is untouched and
no temporary variant file is left behind.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from tests.conftest import Box
from tests.system.daemon_rig import RunningDaemon, real_stack
from tests.system.night_rig import cron_in, generations, wait_for_night
from tests.system.test_tune_real import repeat_workload


def test_an_ngram_sweep_on_rewrite_traffic_picks_a_variant_at_least_as_fast_as_the_default(
        box: Box, real_server: None, tmp_path: Path) -> None:
    base_file = box.profiles_dir / "ngram-simple.toml"
    before = base_file.read_text()
    box.specd("switch", "ngram-simple", check=True)

    result = box.specd("tune", "--sweep", "ngram_simple_size_n=4,8", "--workload",
                       str(repeat_workload(tmp_path / "rewrite.jsonl")), "--n", "4", "--max-n", "4",
                       "--max-tokens", "64", "--no-verify", "--json", timeout=600, check=True)

    decision = json.loads(result.stdout)
    sweep = decision["sweep"]
    assert sweep["base"] == "ngram-simple" and len(sweep["variants"]) == 2
    estimates = decision["estimates"]
    assert "ngram-simple" in estimates, decision  # the base, active, is always benched
    assert set(estimates) | set(decision["left_out"]) == {"ngram-simple", *sweep["variants"]}, decision
    base = estimates["ngram-simple"]
    if decision["switch"]:
        winner = estimates[decision["best"]]
        # faster by the paired rule: the winner's wall clock over the base's, request by request, wholly
        # below 1 - margin
        assert winner["verdict"] == "faster" and winner["ratio_hi"] < 1.0 - decision["margin"], decision["reason"]
        written = Path(sweep["written"])
        assert decision["final_profile"] == written.stem
        assert "# n-gram speculation: drafts tokens" in written.read_text()
        assert "ngram_simple_size_n" in written.read_text()
    else:
        assert sweep["written"] is None and decision["final_profile"] == "ngram-simple", decision["reason"]
        assert estimates[decision["best"]]["median_ms"] <= base["ci_hi_ms"]
    assert base_file.read_text() == before
    assert not list(box.profiles_dir.glob("*.sweep.*")), "temporary variant files were left behind"
    status = json.loads(box.specd("status", "--json", check=True).stdout)
    assert status["active_profile"] == decision["final_profile"]


@real_stack
def test_the_nightly_run_sweeps_the_live_profile_when_the_config_asks(
        box: Box, start_daemon: Callable[..., RunningDaemon], tmp_path: Path) -> None:
    """`[tuner] sweep` in specd.toml: the daemon's own night varies the live profile's n-gram size on the
    owner's workload, within the budget, and either writes the winner as a profile file and switches
    to it or keeps the live profile; history says which, with the variants it benched."""
    base_file = box.profiles_dir / "ngram-simple.toml"
    before = base_file.read_text()
    box.specd("switch", "ngram-simple", check=True)
    workload = repeat_workload(tmp_path / "rewrite.jsonl")
    cron, _ = cron_in(12.0)
    daemon = start_daemon(tuner=f'enabled = true\ncron = "{cron}"\nidle_minutes = 0.05\nbudget_minutes = 5\n'
                                f'n = 3\nmax_n = 12\nworkload = "{workload}"\nsweep = ["ngram_simple_size_n=4,8"]\n')

    event = wait_for_night(box.unit, lambda what, cond, t: daemon.wait_for(what, cond, t), 900.0)

    assert event.kind == "tune", f"{event}\n--- daemon log ---\n{daemon.log()}"
    numbers = event.numbers
    sweep = numbers["sweep"]
    assert sweep["base"] == "ngram-simple" and sweep["axes"] == {"ngram_simple_size_n": [4, 8]}, numbers
    assert sweep["variants"] == 2 and numbers["bench_s"] <= numbers["budget_s"], numbers
    assert base_file.read_text() == before
    assert not list(box.profiles_dir.glob("*.sweep.*")), "temporary variant files were left behind"
    active = json.loads(box.specd("status", "--json", check=True).stdout)["active_profile"]
    if numbers["switched"]:
        written = Path(sweep["written"])
        assert written.stem == active and "ngram_simple_size_n" in written.read_text()
        assert generations(box.unit)[0]["trigger"] == "tuner"
    else:
        assert "written" not in sweep and active == "ngram-simple", numbers
