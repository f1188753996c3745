"""Replay keeps the traffic's concurrency: each request starts once fewer than its level are in flight."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from specd.emulator.model import load_model
from specd.tune.bench import ModelTarget, Settings, run_bench
from specd.tune.replay import plan_rounds, replay_round
from specd.tune.targets import Reply
from specd.tune.workloads import Workload, WorkloadRequest


class Recording:
    """A thread-safe FAKE server: answers after a short wait; notes how many were in flight at each start."""

    concurrent = True

    def __init__(self, seconds: float = 0.05) -> None:
        self.lock = threading.Lock()
        self.seconds = seconds
        self.running = 0
        self.started: list[tuple[str, int]] = []

    def active(self) -> str | None:
        return "x"

    def activate(self, profile: str) -> None:
        return None

    def complete(self, body: Mapping[str, Any], in_flight: int = 1) -> Reply:
        with self.lock:
            self.running += 1
            self.started.append((str(body["messages"][-1]["content"]), self.running))
        time.sleep(self.seconds)
        with self.lock:
            self.running -= 1
        return Reply({"choices": [{"message": {"content": "ok"}}]}, 1000.0 * self.seconds)

    def vram_bytes(self) -> int | None:
        return None


def traffic(levels: list[int]) -> Workload:
    return Workload("recorded", tuple(
        WorkloadRequest(body={"messages": [{"role": "user", "content": f"r{i}"}], "max_tokens": 4},
                        task_class="factual", concurrency=level) for i, level in enumerate(levels)))


def test_a_burst_replays_as_a_burst_and_a_lone_request_alone() -> None:
    levels = [1, 1, 4, 4, 4, 4, 4, 4, 1, 2, 2]
    workload = traffic(levels)
    target = Recording()
    done = replay_round(target, plan_rounds(workload, len(levels), len(levels))[0], lambda i: dict(i.request.body))
    seen = dict(target.started)
    for index, level in enumerate(levels):
        assert seen[f"r{index}"] <= level, (index, target.started)
    assert max(seen[f"r{i}"] for i in range(2, 8)) == 4, "the burst reached its recorded level"
    assert [d.in_flight for d in done][:2] == [1, 1] and done[8].in_flight == 1
    assert [d.item.index for d in done] == list(range(len(levels)))
    order = [name for name, _ in target.started]
    assert order == [f"r{i}" for i in range(len(levels))], "requests start in the order they came in"


def test_a_fixed_concurrency_overrides_the_recorded_levels() -> None:
    target = Recording()
    items = plan_rounds(traffic([1] * 8), 8, 8)[0]
    done = replay_round(target, items, lambda i: dict(i.request.body), concurrency=4)
    assert max(d.in_flight for d in done) == 4


def test_the_model_target_is_told_each_requests_level() -> None:
    model = load_model()
    workload = traffic([1, 8, 8, 8])
    report = run_bench(ModelTarget(model, {"plain": "none"}, active="plain"), ["plain"], workload,
                       Settings(n=4, early_stop=False))
    assert [r.concurrency for r in report.results["plain"]] == [1, 8, 8, 8]
    assert report.traffic["concurrency"] == 8 and report.traffic["concurrency_levels"] == {"1": 1, "8": 3}
    forced = run_bench(ModelTarget(model, {"plain": "none"}, active="plain"), ["plain"], workload,
                       Settings(n=4, early_stop=False, concurrency=2))
    assert {r.concurrency for r in forced.results["plain"]} == {2}
    assert forced.traffic["concurrency"] == 2 and forced.traffic["arrival"] == "closed-loop"


def test_no_request_starts_after_the_deadline() -> None:
    target = Recording(seconds=0.05)
    report = run_bench(target, ["x"], traffic([1] * 40), Settings(n=40, per_round=40, early_stop=False,
                                                                    deadline=time.monotonic() + 0.3))
    ran = len(report.results["x"])
    assert 2 <= ran < 20 and len(target.started) == ran + 1  # and the warm-up
    assert report.notes == ["the time budget was spent in round 1 of 1"]
