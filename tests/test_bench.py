"""specd bench: measuring profiles end to end on the emulator, storing, plotting, restoring."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

from specd.bench import ModelTarget, Report, Result, Settings, measure, request_body, run_bench
from specd.bench import Reply as BenchReply
from specd.emulator_model import load_model
from specd.errors import UsageError
from specd.workloads import Workload, WorkloadRequest, filler_text, load_workload
from tests.conftest import TINY_MODEL, Box

EMULATOR = Path(sys.executable).parent / "specd-emulator"
SEEDS = load_model()
# Emulated profiles: the mode is picked with --spec-type in args (the tiny GGUF has no MTP heads).
EMULATED_MODES = {"plain": "none", "mtp": "draft-mtp", "dflash": "draft-dflash", "ngram": "ngram-simple"}
CODE_ASK = "Write a Python function that parses these ledger entries into a list of dicts."
CREATIVE_ASK = "Write a short story about the night shift at this depot."


def emulated_profiles(box: Box, names: tuple[str, ...] = ("plain", "mtp"), *, time_scale: float = 0.002,
                      twins: tuple[str, ...] = ()) -> None:
    """Replace the box's tiny profiles with specd-emulator ones on the seeds' 3090 Ti tables."""
    for path in box.profiles_dir.glob("*.toml"):
        if path.name != "base.toml":
            path.unlink()
    for name in (*names, *twins):
        mode = EMULATED_MODES[name.split("-")[0]]
        args = ["--emulator-time-scale", str(time_scale)] + (["--spec-type", mode] if mode != "none" else [])
        box.write_profile(name, (
            f'inherits = "base"\nbinary = "{EMULATOR}"\nmodel = "{TINY_MODEL}"\n'
            f"args = {json.dumps(args)}\n"))
    box.edit_profile("base", stability_s=0.5, ctx_size=65536)


def shaped(ask: str, prompt_tokens: int, output_tokens: int, count: int = 4, name: str = "shaped") -> Workload:
    """`count` distinct requests of one shape: a filler context of about prompt_tokens, then `ask`."""
    requests = tuple(
        WorkloadRequest(body={"messages": [
            {"role": "system", "content": f"Reference material:\n{filler_text(prompt_tokens, seed)}"},
            {"role": "user", "content": ask}], "max_tokens": output_tokens},
            task_class="code" if ask == CODE_ASK else "creative")
        for seed in range(count))
    return Workload(name=name, requests=requests)


def save(workload: Workload, path: Path) -> Path:
    from specd.workloads import save_workload

    save_workload(workload, path)
    return path


def test_bench_cli_measures_stores_plots_and_restores(box: Box, tmp_path: Path) -> None:
    emulated_profiles(box)
    box.specd("switch", "plain", check=True)
    workload = save(shaped(CODE_ASK, 500, 256), tmp_path / "code.jsonl")
    plot = tmp_path / "chart.png"
    result = box.specd("bench", "plain", "mtp", "--workload", str(workload), "--n", "6", "--json",
                       "--plot", str(plot), check=True)
    data = json.loads(result.stdout)
    assert data["profiles"] == ["plain", "mtp"]
    plain, mtp = data["cells"]["plain"], data["cells"]["mtp"]
    assert plain["n"] == 6 and 3 <= mtp["n"] <= 6
    assert mtp["wall_ms"]["median"] < plain["wall_ms"]["median"]  # seed 004: MTP wins on code
    assert mtp["acceptance_median"] is not None and plain["acceptance_median"] is None
    assert plain["vram_peak_bytes"] == "n/a"
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    status = json.loads(box.specd("status", "--json", check=True).stdout)
    assert status["active_profile"] == "plain"
    db = sqlite3.connect(Path(box.env["XDG_STATE_HOME"]) / "specd" / "specd.db")
    rows = db.execute("SELECT profile, COUNT(*) FROM bench_samples WHERE run_id=? GROUP BY profile",
                      (data["run_id"],)).fetchall()
    assert dict(rows) == {"plain": 6, "mtp": mtp["n"]}
    history = json.loads(box.specd("history", "--json", check=True).stdout)
    assert [(g["profile"], g["trigger"]) for g in history[:3]] == [
        ("plain", "bench"), ("mtp", "bench"), ("plain", "cli")]


def test_bench_restores_the_original_after_a_failure(box: Box, tmp_path: Path) -> None:
    emulated_profiles(box)
    box.write_profile("broken", f'inherits = "base"\nbinary = "{EMULATOR}"\nmodel = "{TINY_MODEL}"\n'
                                 'args = ["--emulator-config", "/nonexistent.toml"]\n')
    box.specd("switch", "plain", check=True)
    workload = save(shaped(CODE_ASK, 100, 32, count=2), tmp_path / "w.jsonl")
    result = box.specd("bench", "mtp", "broken", "--workload", str(workload), "--n", "3", "--json", check=True)
    data = json.loads(result.stdout)
    assert data["profiles"] == ["mtp"]
    assert any(note.startswith("broken: not benched") for note in data["notes"])
    assert json.loads(box.specd("status", "--json", check=True).stdout)["active_profile"] == "plain"
