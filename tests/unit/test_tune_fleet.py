"""`specd tune-table`'s reading of `specd tune --json` documents from several boxes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specd.deploy.status import parse_record
from specd.errors import UsageError
from specd.tune.fleet import TUNE_SCHEMA, load_rows

GIB = 1024**3


def document(box: str, best: str, medians: dict[str, float], gpus: list[dict] | None = None) -> dict:
    return {
        "schema": TUNE_SCHEMA, "box": {"name": box, "hardware": {"cpu_count": 16, "memory_bytes": 64 * GIB,
                                                                 "gpus": gpus or []}},
        "deployment": {"name": "llama-server", "unit": "llama-server.service"}, "workload": "code",
        "models": {name: "qwen.gguf" for name in medians}, "best": best, "final_profile": best, "reason": "x",
        "estimates": {name: {"n": 10, "median_ms": ms, "ci_lo_ms": ms - 5, "ci_hi_ms": ms + 5}
                      for name, ms in medians.items()},
    }


def test_rows_per_box_and_profile_sorted_by_box_then_wall_clock(tmp_path: Path) -> None:
    a = tmp_path / "a.json"
    b = tmp_path / "b.json"
    a.write_text(json.dumps(document("gpu-b", "mtp", {"plain": 900.0, "mtp": 600.0},
                                     [{"name": "RTX 4090", "total_bytes": 24 * GIB}])))
    b.write_text(json.dumps(document("gpu-a", "plain", {"plain": 800.0, "mtp": 850.0})))

    rows = load_rows([a, b])

    assert [(r.box, r.profile, r.best) for r in rows] == [
        ("gpu-a", "plain", True), ("gpu-a", "mtp", False), ("gpu-b", "mtp", True), ("gpu-b", "plain", False)]
    assert rows[0].hardware == "16 CPUs, 64 GiB; no GPU"
    assert rows[2].hardware == "16 CPUs, 64 GiB; RTX 4090 24 GiB"
    assert rows[2].model == "qwen.gguf" and rows[2].active_after


def test_a_document_of_another_schema_is_refused_naming_the_file(tmp_path: Path) -> None:
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"best": "mtp", "estimates": {}}))  # `specd tune --json` before box identity
    with pytest.raises(UsageError, match=r"old.json: schema is None, expected 'specd.tune/1'"):
        load_rows([old])
    broken = tmp_path / "broken.json"
    broken.write_text('{"schema": \n')
    with pytest.raises(UsageError, match=r"broken.json line 2: not JSON"):
        load_rows([broken])


def test_tuner_event_details_read_back_into_reason_and_numbers() -> None:
    reason, numbers = parse_record('kept plain: 2% faster | not enough | {"best":"mtp","switched":false}')
    assert reason == "kept plain: 2% faster | not enough" and numbers == {"best": "mtp", "switched": False}
    assert parse_record("pinned to plain") == ("pinned to plain", {})


def test_box_identity_names_the_box_from_specd_box_and_says_why_there_is_no_gpu(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from specd.gpu.nvml import GpuDevice, GpuState, NoGpu
    from specd.setup.box import box_identity

    monkeypatch.setenv("SPECD_BOX", "gpu-a")
    plain = box_identity(NoGpu("the NVIDIA kernel driver is not loaded")).as_json()
    assert plain["name"] == "gpu-a" and plain["hardware"]["gpus"] == []
    assert plain["hardware"]["gpu_note"] == "the NVIDIA kernel driver is not loaded"
    assert plain["hardware"]["cpu_count"] >= 1 and plain["hardware"]["memory_bytes"] > 0
    card = GpuDevice(0, "RTX 3090 Ti", "GPU-1", 24 * GIB, 20 * GIB, 4 * GIB)
    monkeypatch.delenv("SPECD_BOX")
    with_gpu = box_identity(GpuState((card,), "550.54", "12.4")).as_json()
    assert with_gpu["name"] == with_gpu["hostname"]
    assert with_gpu["hardware"]["gpus"] == [{"index": 0, "name": "RTX 3090 Ti", "uuid": "GPU-1",
                                             "total_bytes": 24 * GIB}]
    assert with_gpu["hardware"]["gpu_driver"] == "550.54" and with_gpu["hardware"]["gpu_note"] is None


def test_a_profile_left_out_on_one_box_keeps_its_row_and_says_why(tmp_path: Path) -> None:
    """An n-gram profile that drafted nothing on one box is not silently missing from the fleet table."""
    left = document("box2", "plain", {"plain": 800.0})
    left["models"]["ngram"] = "qwen.gguf"
    left["left_out"] = {"ngram": "left out: configured but inactive on this model/binary "
                                 "(no token drafted in 2 requests)"}
    path = tmp_path / "box2.json"
    path.write_text(json.dumps(left))

    rows = load_rows([path])

    assert [(r.profile, r.median_ms, r.best) for r in rows] == [("plain", 800.0, True), ("ngram", None, False)]
    assert "no token drafted" in rows[1].verdict and rows[1].model == "qwen.gguf"


def test_left_out_names_the_inactive_speculator_and_the_failed_bench() -> None:
    from specd.tune.activity import Activity
    from specd.tune.stats import summarize
    from specd.tune.tuner import left_out_of

    summaries = {"plain": summarize([100.0, 110.0, 120.0])}
    activities = {"plain": Activity("plain", False, "plain", 3, 0, 0),
                  "ngram": Activity("ngram", True, "inactive", 3, 0, 0)}
    notes = ["mtp: not benched: the switch to mtp failed: health gate timed out", "ngram: no drafts"]

    reasons = left_out_of(["plain", "ngram", "mtp", "draft"], summaries, activities, notes)

    assert list(reasons) == ["ngram", "mtp", "draft"]
    assert reasons["ngram"].startswith("left out: configured but inactive") and "3 requests" in reasons["ngram"]
    assert reasons["mtp"] == "not benched: the switch to mtp failed: health gate timed out"
    assert reasons["draft"] == "not benched"
