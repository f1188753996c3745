"""The tuner-accuracy benchmark's truth taken DURING the tuner's runs (benchmarks/held_out_truth.py): the
tuner's own requests and timings untouched, a truth step (one held-out prompt on every profile) after
every k of them, the tuner's serving profile restored after each step, whole draws at the end. A
recording fake target stands in for the servers: what is checked is which request went where, in what
order, which no real server can report back."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from specd.tune.targets import Reply
from specd.tune.workloads import Workload, WorkloadRequest
from tests.conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
from held_out_truth import TruthDuring

PROFILES = ("autoregressive", "ngram-simple", "draft")


class FakeRecordingTarget:
    """Answers at once; records (profile, prompt, seed) of every request and times each as its position."""

    concurrent = True
    cheap_switches = True

    def __init__(self) -> None:
        self.current = "autoregressive"
        self.sent: list[tuple[str, str, int]] = []

    def active(self) -> str | None:
        return self.current

    def activate(self, profile: str) -> None:
        self.current = profile

    def complete(self, body: Mapping[str, Any], in_flight: int = 1) -> Reply:
        self.sent.append((self.current, str(body["messages"][0]["content"]), int(body.get("seed", -1))))
        return Reply({"usage": {"completion_tokens": 4}}, float(len(self.sent)))


def held_out(count: int) -> Workload:
    return Workload("held", tuple(WorkloadRequest({"messages": [{"role": "user", "content": f"held {i}"}],
                                                   "max_tokens": 4}, "creative") for i in range(count)))


def test_a_truth_step_follows_every_kth_tuner_request_and_the_tuner_keeps_its_profile_and_timings() -> None:
    inner = FakeRecordingTarget()
    during = TruthDuring(inner, held_out(3), PROFILES, draft_prompts=1, every=2)
    during.activate("ngram-simple")
    replies = [during.complete({"messages": [{"content": f"tuner {i}"}], "seed": 7}) for i in range(4)]
    assert [r.wall_ms for r in replies] == [1.0, 2.0, 6.0, 7.0]  # each the tuner's own request, timed alone
    tuner_sends = [s for s in inner.sent if s[1].startswith("tuner")]
    assert [s[0] for s in tuner_sends] == ["ngram-simple"] * 4  # the serving profile back after each step
    prompts = [s[1] for s in inner.sent]
    assert prompts == ["tuner 0", "tuner 1", "held 0", "held 0", "held 0", "tuner 2", "tuner 3",
                       "held 1", "held 1"]  # prompt 0 on all three (draft too), prompt 1 without the draft
    assert {s[0] for s in inner.sent if s[1] == "held 0"} == set(PROFILES)
    assert during.found["walls"]["draft"] == [[5.0], [], []]


def test_finish_completes_whole_draws_with_a_seed_per_draw() -> None:
    inner = FakeRecordingTarget()
    during = TruthDuring(inner, held_out(2), PROFILES[:2], draft_prompts=0, every=1)
    during.complete({"messages": [{"content": "tuner 0"}]})  # one step taken: prompt 0, draw 0
    found = during.finish(min_draws=2)
    assert [len(d) for d in found["walls"]["autoregressive"]] == [2, 2]
    seeds = {(s[1], s[2]) for s in inner.sent if s[1].startswith("held")}
    assert len({seed for prompt, seed in seeds if prompt == "held 0"}) == 2  # two draws, two seeds
    during.complete({"messages": [{"content": "tuner 1"}]})  # a step more: prompt 0 of draw 2
    assert [len(d) for d in during.finish(min_draws=2)["walls"]["ngram-simple"]] == [3, 3]  # whole draws
