"""Concurrency, prompt-cache reuse and reasoning in bench and tuner: pure pieces, the emulator model,
the tiny server."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from specd.errors import HealthError
from specd.tune.bench import ModelTarget, Settings, measure, run_bench
from specd.tune.replay import plan_rounds, replay_round
from specd.tune.targets import Reply
from specd.tune.tuner import tune
from specd.tune.workloads import (
    Workload,
    levels_by_period,
    multi_turn,
    period_note,
    save_workload,
    typical_level,
)
from tests.conftest import Box
from tests.system.test_bench import CODE_ASK, SEEDS, emulated_profiles, save, shaped
from tests.system.test_tune_real import repeat_workload

# --- rounds and replay -------------------------------------------------------------------------------


def test_rounds_keep_conversations_whole_and_in_order() -> None:
    chat = multi_turn(conversations=3, turns=3)
    rounds = plan_rounds(chat, 7, 2)
    assert [[i.index for i in r] for r in rounds] == [[0, 1, 2], [3, 4, 5], [6]]
    assert [i.after for i in rounds[0]] == [None, 0, 1] and [i.after for i in rounds[1]] == [None, 0, 1]
    again = plan_rounds(Workload("two", chat.requests[:2]), 4, 4)[0]  # a short workload repeats within a round
    assert [(i.index, i.after) for i in again] == [(0, None), (1, 0), (0, None), (1, 2)]
    single = plan_rounds(shaped(CODE_ASK, 50, 8, count=2), 5, 2)
    assert [[i.index for i in r] for r in single] == [[0, 1], [0, 1], [0]]


class Recording:
    """A thread-safe fake server: answers after a short wait, remembers what it was sent and the peak load."""

    concurrent = True

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sent: list[Mapping[str, Any]] = []
        self.running = 0
        self.peak = 0

    def active(self) -> str | None:
        return "x"

    def activate(self, profile: str) -> None:
        return None

    def complete(self, body: Mapping[str, Any], in_flight: int = 1) -> Reply:
        with self.lock:
            self.running += 1
            self.peak = max(self.peak, self.running)
            self.sent.append(body)
        time.sleep(0.02)
        with self.lock:
            self.running -= 1
        last = body["messages"][-1]["content"]
        return Reply({"choices": [{"message": {"content": f"live answer to {last}"}}]}, 20.0)

    def vram_bytes(self) -> int | None:
        return None


def test_replay_runs_conversations_side_by_side_turns_in_order_with_live_answers() -> None:
    chat = multi_turn(conversations=4, turns=3)
    target = Recording()
    items = plan_rounds(chat, 12, 12)[0]
    done = replay_round(target, items, lambda i: dict(i.request.body), concurrency=4)
    assert [d.item.index for d in done] == list(range(12)) and target.peak == 4
    assert max(d.in_flight for d in done) == 4
    for conversation in range(4):
        turns = [b for b in target.sent if b["messages"][0] == chat.requests[3 * conversation].body["messages"][0]]
        assert [len(b["messages"]) for b in turns] == [2, 4, 6]  # each turn after the previous answer
        third = turns[2]["messages"]
        assert third[2]["content"] == f"live answer to {third[1]['content']}"  # not the recorded placeholder
    serial = Recording()
    replay_round(serial, items, lambda i: dict(i.request.body), concurrency=1)
    assert serial.peak == 1


def test_a_failed_request_in_a_concurrent_round_is_the_error_reported() -> None:
    class Failing(Recording):
        def complete(self, body: Mapping[str, Any], in_flight: int = 1) -> Reply:
            if len(body["messages"]) == 2 and body["messages"][1]["content"].startswith("Which"):  # chat-1, turn 1
                raise HealthError("the server answered 500")
            return super().complete(body, in_flight)

    target = Failing()
    report = run_bench(target, ["x"], multi_turn(conversations=4, turns=3), Settings(n=12, concurrency=4, retries=0))
    assert report.benched() == [] and report.notes == [("x: not benched: round 1 (6 requests) failed: the server "
                                                       "answered 500")]


# --- workloads and traffic shape ---------------------------------------------------------------------


def test_concurrency_levels_from_traffic_and_time_of_day() -> None:
    assert typical_level([]) == 1 and typical_level([1, 1, 2]) == 1 and typical_level([8, 8, 7]) == 8
    night = time.mktime((2026, 1, 5, 2, 0, 0, 0, 0, -1))
    day = time.mktime((2026, 1, 5, 14, 0, 0, 0, 0, -1))
    levels = levels_by_period([(night, 8)] * 5 + [(day, 1)] * 5)
    assert levels == {"night": 8, "afternoon": 1}
    note = period_note(levels)
    assert note is not None and "night" in note and "--period" in note
    assert period_note({"night": 2, "afternoon": 1.5}) is None  # type: ignore[dict-item]
    workload = shaped(CODE_ASK, 50, 8).at_concurrency(8)
    assert workload.concurrency == 8 and not workload.has_arrivals


def test_measure_reads_cache_n_and_reasoning_tokens() -> None:
    request = shaped(CODE_ASK, 50, 32).requests[0]
    payload = {"usage": {"completion_tokens": 40, "completion_tokens_details": {"reasoning_tokens": 30}},
               "timings": {"cache_n": 300, "prompt_n": 100, "prompt_ms": 50.0, "predicted_n": 40,
                           "predicted_ms": 400.0}}
    result = measure("plain", 0, request, Reply(payload, 460.0), None, in_flight=3)
    assert (result.cache_n, result.reasoning_tokens, result.concurrency) == (300, 30, 3)
    assert result.prefill_no_reuse_ms == 200.0 and result.output_tokens == 40
    thought = {"choices": [{"message": {"content": "4", "reasoning_content": "two and two make four" * 4}}]}
    assert measure("plain", 0, request, Reply(thought, 10.0), None).reasoning_tokens == 21


# --- the emulator's performance model: the tuner's choice follows concurrency ------------------------


@pytest.mark.parametrize("speculative", ["mtp", "dflash"])
def test_the_tuner_turns_speculation_on_single_stream_and_off_when_busy(speculative: str) -> None:
    modes = {"plain": "none", speculative: speculative}
    code = shaped(CODE_ASK, 500, 256)
    alone = tune(ModelTarget(SEEDS, modes, seed=1, active="plain"), list(modes), code, Settings(n=10))
    assert alone.decision.best == speculative and alone.final_profile == speculative
    busy = tune(ModelTarget(SEEDS, modes, seed=1, active=speculative), list(modes), code.at_concurrency(8),
                Settings(n=10))
    assert busy.decision.best == "plain" and busy.decision.switch and busy.final_profile == "plain"
    assert any("concurrency 8" in note for note in busy.decision.notes)


def test_cache_reuse_on_the_model_shows_in_cache_n_and_prefill() -> None:
    chat = multi_turn(conversations=2, turns=3, context_tokens=2000)
    target = ModelTarget(SEEDS, {"plain": "none"}, active="plain")
    reuse = run_bench(target, ["plain"], chat, Settings(n=6, cache_reuse=True, early_stop=False))
    cold = run_bench(target, ["plain"], chat, Settings(n=6, early_stop=False, cache_reuse=False))
    warm_rows = reuse.results["plain"]
    assert [r.cache_n > 1000 for r in warm_rows] == [False, True, True, False, True, True]
    assert all(r.cache_n == 0 for r in cold.results["plain"])
    assert sum(r.prefill_ms for r in warm_rows) < 0.5 * sum(r.prefill_ms for r in cold.results["plain"])


# --- the real tiny llama-server ----------------------------------------------------------------------


def test_multi_turn_reuses_the_prompt_cache_on_the_real_server(box: Box, real_server: None, tmp_path: Path) -> None:
    chat = tmp_path / "chat.jsonl"
    save_workload(multi_turn(conversations=1, turns=3, context_tokens=300, max_tokens=8), chat)
    box.specd("switch", "autoregressive", check=True)
    data = json.loads(box.specd("bench", "autoregressive", "--workload", str(chat), "--n", "3", "--cache-reuse",
                                "--json", timeout=300, check=True).stdout)
    rows = data["cells"]["autoregressive"]["requests"]
    print(f"\ncache_n by turn: {[r['cache_n'] for r in rows]}, prefill ms {[round(r['prefill_ms']) for r in rows]}")
    assert rows[0]["cache_n"] < 50 and all(r["cache_n"] > 250 for r in rows[1:])
    cell = data["cells"]["autoregressive"]
    assert cell["prefill_ms_no_reuse_median"] > cell["prefill_ms_median"]


def test_a_concurrent_bench_on_the_real_server_runs_requests_side_by_side(box: Box, real_server: None,
                                                                        tmp_path: Path) -> None:
    """Behaviour only: which profile is faster at concurrency 8 is a measurement, not a pass/fail
    fact; benchmarks/concurrency_table.py measures it."""
    for name, spec in (("plain-np8", ""), ("ngram-np8", '[speculative]\ntype = "ngram-simple"\ndraft_n_max = 16\n')):
        box.write_profile(name, f'inherits = "base"\nparallel = 8\nctx_size = 8192\n{spec}')
    box.specd("switch", "plain-np8", check=True)
    workload = repeat_workload(tmp_path / "rewrite.jsonl")
    data = json.loads(box.specd("bench", "plain-np8", "ngram-np8", "--workload", str(workload), "--n", "8",
                                "--max-tokens", "16", "--concurrency", "8", "--json", timeout=600,
                                check=True).stdout)
    assert data["concurrency"] == 8 and sorted(data["cells"]) == ["ngram-np8", "plain-np8"]
    for cell in data["cells"].values():
        in_flight = [r["concurrency"] for r in cell["requests"]]
        assert len(in_flight) == 8 and max(in_flight) > 1, in_flight  # requests overlapped on the server
        assert all(r["output_tokens"] > 0 for r in cell["requests"])
    assert json.loads(box.specd("status", "--json", check=True).stdout)["active_profile"] == "plain-np8"


def test_tune_levels_names_the_best_per_level_and_the_single_choice_and_pins_each_time_of_day(
        box: Box, tmp_path: Path) -> None:
    """`specd tune-levels` on emulated servers under the private systemd: MTP wins one stream at a time,
    plain wins at 8 in flight (the seeds' tables), and the box is back on the profile it started on.
    The workload was recorded one at a time at night and 8 at a time in the afternoon: `--apply` pins
    the night to MTP and the afternoon to plain (the daemon applies them: tests/system/test_schedule.py)."""
    emulated_profiles(box, time_scale=0.2)  # a modelled 10 s request takes 2 s: 8 clients really overlap
    box.edit_profile("base", parallel=8)
    box.specd("switch", "plain", check=True)
    requests = shaped(CODE_ASK, 500, 256, count=8).requests
    night, afternoon = time.mktime((2026, 11, 20, 2, 0, 0, 0, 0, -1)), time.mktime((2026, 11, 20, 14, 0, 0, 0, 0, -1))
    recorded = [dataclasses.replace(r, recorded_at=night + i, concurrency=1) if i % 2 else
                dataclasses.replace(r, recorded_at=afternoon + i, concurrency=8) for i, r in enumerate(requests)]
    workload = save(Workload("code", tuple(recorded)), tmp_path / "code.jsonl")

    result = box.specd("tune-levels", "plain", "mtp", "--levels", "1,8", "--workload", str(workload), "--n", "16",
                       "--apply", "--json", timeout=600, check=True)

    plan = json.loads(result.stdout)
    print(f"\ntune-levels on the emulator: {plan['levels']}; regret {plan['regret']}; schedule {plan['schedule']}")
    assert [(level["level"], level["best"]) for level in plan["levels"]] == [(1, "mtp"), (8, "plain")], plan
    assert plan["single"] in ("plain", "mtp") and plan["regret"][plan["single"]] == min(plan["regret"].values())
    assert "llama-server cannot switch by batch size" in plan["sentence"]
    assert plan["levels_by_period"] == {"night": 1, "afternoon": 8}
    assert plan["schedule"] == {"night": "mtp", "afternoon": "plain"} and plan["applied"] is True
    assert plan["back_on"] == "plain"
    assert json.loads(box.specd("status", "--json", check=True).stdout)["schedule"] == plan["schedule"]
    assert json.loads(box.specd("status", "--json", check=True).stdout)["active_profile"] == "plain"
