"""specd bench: measuring profiles end to end on the emulator, storing, plotting, restoring."""

from __future__ import annotations

import itertools
import json
import sqlite3
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from specd.emulator.model import load_model
from specd.errors import UsageError
from specd.tune.bench import ModelTarget, Result, Settings, measure, request_body, run_bench
from specd.tune.bench import Reply as BenchReply
from specd.tune.workloads import Workload, WorkloadRequest, filler_text
from tests.conftest import TINY_MODEL, Box

EMULATOR = Path(sys.executable).parent / "specd-emulator"
SEEDS = load_model()
# Emulated profiles: the mode is picked with --spec-type in args (the tiny GGUF has no MTP heads).
EMULATED_MODES = {"plain": "none", "mtp": "draft-mtp", "dflash": "draft-dflash", "ngram": "ngram-simple"}
CODE_ASK = "Write a Python function that parses these ledger entries into a list of dicts."
CREATIVE_ASK = "Write a short story about the night shift at this depot."


def emulated_profiles(box: Box, names: tuple[str, ...] = ("plain", "mtp"), *, time_scale: float = 0.005,
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


# --- pure pieces and the sampling loop, on the model target (no server) ----------------------------


def test_request_body_keeps_the_traffics_sampling_with_a_fixed_seed_per_request() -> None:
    first, second = shaped(CODE_ASK, 50, 500, count=2).requests
    sampled = WorkloadRequest(body={**first.body, "temperature": 0.7, "top_p": 0.9, "stream": True,
                                    "stream_options": {"include_usage": True}}, task_class="code")
    body = request_body(sampled, Settings(max_tokens=64))
    assert body["max_tokens"] == 64 and body["temperature"] == 0.7 and body["top_p"] == 0.9
    assert body["cache_prompt"] is False and body["stream"] is False and "stream_options" not in body
    assert "specd" not in body
    again = request_body(sampled, Settings())
    assert again["seed"] == body["seed"], "the same request draws with the same seed every time"
    assert request_body(first, Settings())["seed"] != request_body(second, Settings())["seed"]
    assert "temperature" not in request_body(first, Settings())  # none sent: the server's default, as in production
    assert request_body(sampled, Settings(temperature=0.0))["temperature"] == 0.0  # greedy stays an option
    own = WorkloadRequest(body={**first.body, "seed": 7}, task_class="code")
    assert request_body(own, Settings())["seed"] == 7


def test_measure_reads_timings_and_tolerates_missing_fields() -> None:
    request = shaped(CODE_ASK, 50, 32).requests[0]
    full = measure("mtp", 0, request, BenchReply({"timings": {"prompt_n": 60, "prompt_ms": 100.0, "predicted_n": 32,
                                                              "predicted_ms": 400.0, "draft_n": 20,
                                                              "draft_n_accepted": 15}}, 520.0), None)
    assert (full.prompt_tokens, full.output_tokens, full.wall_ms) == (60, 32, 520.0)
    assert full.decode_tok_s == 80.0 and full.acceptance == 0.75
    bare = measure("plain", 0, request, BenchReply({"usage": {"completion_tokens": 10}}, 300.0), None)
    assert bare.output_tokens == 10 and bare.decode_ms == 300.0 and bare.draft_n is None and bare.acceptance is None


def test_profiles_interleave_and_stop_early_once_separated_and_the_original_is_restored() -> None:
    target = ModelTarget(SEEDS, {"plain": "none", "mtp": "mtp"}, active="plain")
    report = run_bench(target, ["plain", "mtp"], shaped(CODE_ASK, 500, 256), Settings(n=12, per_round=3))
    # Rounds of 3: plain mtp | mtp plain | ...; both leave once separated at the floor (6), after round 2.
    assert len(report.results["plain"]) == len(report.results["mtp"]) == 6
    assert report.stopped_early == {"plain": True, "mtp": True} and report.rounds == 2
    assert report.switches == 3  # plain, mtp | (mtp keeps running) plain
    assert target.active() == "plain"
    assert report.summary("mtp").median < report.summary("plain").median


class Drifting(ModelTarget):
    """The box slows down steadily (another job ramps up): every request is slower than the one before."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.sent = 0
        self.order: list[str] = []

    def activate(self, profile: str) -> None:
        super().activate(profile)
        self.order.append(profile)

    def complete(self, body: Mapping[str, object], in_flight: int = 1) -> BenchReply:
        reply = super().complete(body, in_flight)
        self.sent += 1
        return BenchReply(reply.payload, reply.wall_ms * (1.0 + 0.05 * self.sent))


def test_interleaving_keeps_a_load_drift_from_flipping_the_pick() -> None:
    # mtp is ~1.3x faster on code; a block bench (all plain, then all mtp) on a box slowing 5% per request
    # would see mtp slower. Interleaved rounds see both under the same drift.
    target = Drifting(SEEDS, {"plain": "none", "mtp": "mtp"}, active="plain")
    report = run_bench(target, ["plain", "mtp"], shaped(CODE_ASK, 500, 256), Settings(n=12, per_round=1,
                                                                                      early_stop=False))
    assert report.summary("mtp").median < report.summary("plain").median
    assert target.order == ["plain", "mtp"] * 6 + ["plain"]  # A B | B A | A B ...; the last one restores
    block = Drifting(SEEDS, {"plain": "none", "mtp": "mtp"}, active="plain")
    blocks = {p: run_bench(block, [p], shaped(CODE_ASK, 500, 256), Settings(n=12, early_stop=False))
              for p in ("plain", "mtp")}
    assert blocks["mtp"].summary("mtp").median > blocks["plain"].summary("plain").median  # the flip it prevents


def test_ctrl_c_still_restores_the_original_profile() -> None:
    class Interrupting(ModelTarget):
        def complete(self, body: Mapping[str, object], in_flight: int = 1) -> BenchReply:
            if self.active() == "mtp":
                raise KeyboardInterrupt
            return super().complete(body, in_flight)

    target = Interrupting(SEEDS, {"plain": "none", "mtp": "mtp"}, active="plain")
    with pytest.raises(KeyboardInterrupt):
        run_bench(target, ["mtp"], shaped(CODE_ASK, 100, 16), Settings(n=3))
    assert target.active() == "plain"


def test_bad_settings_and_profile_lists_are_refused() -> None:
    with pytest.raises(UsageError):
        Settings(n=0)
    target = ModelTarget(SEEDS, {"plain": "none"}, active="plain")
    with pytest.raises(UsageError, match="listed twice"):
        run_bench(target, ["plain", "plain"], shaped(CODE_ASK, 100, 16), Settings(n=3))
    report = run_bench(target, ["plain", "nope"], shaped(CODE_ASK, 100, 16), Settings(n=3))
    assert report.benched() == ["plain"] and report.notes[0].startswith("nope: not benched")


def test_the_time_budget_stops_sampling() -> None:
    target = ModelTarget(SEEDS, {"plain": "none", "mtp": "mtp"}, active="plain")
    report = run_bench(target, ["plain", "mtp"], shaped(CODE_ASK, 100, 16), Settings(n=5, deadline=0.0))
    assert report.benched() == [] and len(report.notes) == 2


def test_plot_draws_a_png(tmp_path: Path) -> None:
    from specd.tune.plot import plot_wall_vs_output

    rows = [Result("plain", 0, "code", 10, out, 5.0, out * 30.0, out * 30.0 + 5.0) for out in (16, 64, 256)]
    path = plot_wall_vs_output({"plain": rows, "mtp": []}, tmp_path / "c.png")
    assert path.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(UsageError):
        plot_wall_vs_output({"plain": []}, tmp_path / "d.png")


def save(workload: Workload, path: Path) -> Path:
    from specd.tune.workloads import save_workload

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
    traffic = data["traffic"]  # what was replayed, and how
    assert (traffic["source"], traffic["path"], traffic["size"], traffic["class_mix"]) == (
        "file", str(workload), 4, {"code": 4})
    assert (traffic["concurrency"], traffic["cache_reuse"], traffic["sampling"]) == (1, False, {"server defaults": 4})
    plain, mtp = data["cells"]["plain"], data["cells"]["mtp"]
    assert 3 <= plain["n"] == mtp["n"] <= 6 and data["rounds"] >= 2  # interleaved: A B | B A | ...
    assert mtp["wall_ms"]["median"] < plain["wall_ms"]["median"]  # seed 004: MTP wins on code
    assert mtp["acceptance_median"] is not None and plain["acceptance_median"] is None
    assert plain["vram_peak_bytes"] == "n/a"
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    status = json.loads(box.specd("status", "--json", check=True).stdout)
    assert status["active_profile"] == "plain"
    db = sqlite3.connect(Path(box.env["XDG_STATE_HOME"]) / "specd" / "specd.db")
    rows = db.execute("SELECT profile, COUNT(*) FROM bench_samples WHERE run_id=? GROUP BY profile",
                      (data["run_id"],)).fetchall()
    assert dict(rows) == {"plain": plain["n"], "mtp": mtp["n"]}
    history = [(g["profile"], g["trigger"]) for g in json.loads(box.specd("history", "--json", check=True).stdout)]
    steps = list(itertools.takewhile(lambda g: g[1] == "bench", history))  # newest first
    # plain, mtp | mtp, plain | ... (as many rounds as the evidence took): each step a switch to the
    # other profile, the last one back on plain, and before them the owner's own switch to plain.
    assert len(steps) >= 2 and steps[0] == ("plain", "bench") and history[len(steps)] == ("plain", "cli"), history
    assert all(a[0] != b[0] for a, b in itertools.pairwise(steps)), history


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
