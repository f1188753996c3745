"""A sweep of the n-gram sizes on the real tiny llama-server, through `specd tune --sweep`.

Which size is fastest on this 2-core box is a measurement (benchmarks/results/sweep.md), not a
pass/fail fact. What a user relies on is asserted: the pick is at least as fast as the base by the
bench's own CI (the tuner only leaves the base for a variant whose CI is separated and faster), a
winner becomes a new profile file that keeps the base's comments, the base file is untouched and
no temporary variant file is left behind.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import Box
from tests.system.test_tune_real import repeat_workload


def test_an_ngram_sweep_on_rewrite_traffic_picks_a_variant_at_least_as_fast_as_the_default(
        box: Box, real_server: None, tmp_path: Path) -> None:
    base_file = box.profiles_dir / "ngram-simple.toml"
    before = base_file.read_text()
    box.specd("switch", "ngram-simple", check=True)

    result = box.specd("tune", "--sweep", "ngram_simple_size_n=4,8", "--workload",
                       str(repeat_workload(tmp_path / "rewrite.jsonl")), "--n", "4", "--max-tokens", "64",
                       "--no-verify", "--json", timeout=600, check=True)

    decision = json.loads(result.stdout)
    sweep = decision["sweep"]
    assert sweep["base"] == "ngram-simple" and len(sweep["variants"]) == 2
    estimates = decision["estimates"]
    assert set(estimates) == {"ngram-simple", *sweep["variants"]}, decision
    base = estimates["ngram-simple"]
    if decision["switch"]:
        winner = estimates[decision["best"]]
        assert winner["ci_hi_ms"] < base["ci_lo_ms"], decision["reason"]  # faster, CIs apart
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
