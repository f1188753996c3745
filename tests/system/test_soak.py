"""A short soak: `benchmarks/soak.py` for ~60 s with 16 streaming clients and two profile switches.

The real daemon, the real CLI and a private systemd manager; the backend is `specd-emulator` (not
a real server), whose streamed tokens are a fixed sequence, so every chunk is checked. The long
run (10 minutes, 64 clients) is the benchmark itself; its figures are in docs/reliability.md.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from types import ModuleType

import pytest

from tests.conftest import REPO, TINY_MODEL


def soak_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("soak", REPO / "benchmarks" / "soak.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("soak", module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def event(content: str | None) -> str:
    return "data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": content}}]}) + "\n\n"


def test_the_soak_checker_counts_lost_duplicated_and_reordered_chunks() -> None:
    soak = soak_module()
    expected = ["a", "b", "c", "d"]
    tally = soak.Tally()
    assert tally.check(expected, ["a", "b", "c", "d"]) is True
    assert tally.check(expected, ["a", "b", "d"]) is False  # one lost
    assert tally.check(expected, ["a", "b", "b", "c", "d"]) is False  # one duplicated
    assert tally.check(expected, ["a", "c", "b", "d"]) is False  # reordered
    assert (tally.chunks_lost, tally.chunks_duplicated, tally.out_of_order) == (1, 1, 1)
    whole = event(None) + event("a") + event("b") + "data: [DONE]\n\n"
    assert soak.parse_stream(whole) == (["a", "b"], True, None)
    cut = event("a") + 'data: {"error": {"message": "specd proxy is shutting down"}}\n\n'
    assert soak.parse_stream(cut) == (["a"], False, "specd proxy is shutting down")
    assert soak.parse_stream(event("a")[:-3])[2] is not None  # ended mid-event


@pytest.mark.systemd
def test_sixteen_streaming_clients_lose_no_chunk_across_two_switches() -> None:
    if not TINY_MODEL.exists():
        pytest.fail(f"missing {TINY_MODEL}: run scripts/get-test-model.sh (preflight reads its header)")
    result = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "soak.py"), "--minutes", "1", "--clients", "16",
         "--switch-every-s", "25", "--time-scale", "0.05"],
        capture_output=True, text=True, timeout=240, check=False, cwd=str(REPO))
    assert result.stdout, result.stderr[-4000:]
    report = json.loads(result.stdout)
    assert report["requests"] > 16 and report["streams_completed"] == report["requests"], report["failure_examples"]
    assert report["failures"] == 0
    assert report["chunks_lost"] == 0 and report["chunks_duplicated"] == 0 and report["streams_reordered"] == 0
    assert report["chunks_received"] == report["chunks_expected"] > 0
    assert report["switches"] == 2 and report["switches_failed"] == 0, report["switch_errors"]
    assert report["daemon_exit"] == 0
    assert report["traffic_rows_match"], report["traffic_table"]
    assert result.returncode == 0
