"""The held-out truth of benchmarks/tuner_accuracy_real.py: every profile on held-out prompts, measured apart.

A truth *step* is one held-out prompt in one draw (its seed) on every profile, back to back in a rotated
order (the draft profile only on the first few prompts). The truth is taken in whole draws before or
after the tuner's runs (`measure_truth`), or a step at a time *during* them (`TruthDuring`): on a box
whose load moves, a profile's speed relative to another moves with it (on the 2-core box under the
test suite n-gram went from 5% to 20% ahead of plain within one case), so a truth measured in bursts
beside the tuner's runs scores them against a different box than the one they ran on. Interleaved, the
truth's samples spread over the same minutes as the tuner's, at the same loads.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from specd.tune.bench import Settings, request_body
from specd.tune.targets import Reply, Target
from specd.tune.workloads import Workload


def empty_truth(profiles: Sequence[str], count: int) -> dict[str, Any]:
    """walls[profile][prompt] and output_tokens[profile][prompt]: one entry per draw measured."""
    return {"walls": {p: [[] for _ in range(count)] for p in profiles},
            "output_tokens": {p: [[] for _ in range(count)] for p in profiles}}


def truth_step(target: Target, held_out: Workload, profiles: Sequence[str], draw: int, index: int,
               draft_prompts: int, found: dict[str, Any]) -> None:
    """Held-out prompt `index`, seed `draw`, on every profile back to back (the order rotates with both)."""
    settings = Settings()
    request = held_out.requests[index]
    shift = (index + draw) % len(profiles)
    order = tuple(profiles[shift:]) + tuple(profiles[:shift])
    for profile in order if draw % 2 == 0 else tuple(reversed(order)):
        if profile == "draft" and index >= draft_prompts:
            continue
        target.activate(profile)
        reply = target.complete(request_body(request, settings, cycle=draw))
        found["walls"][profile][index].append(reply.wall_ms)
        found["output_tokens"][profile][index].append(int(reply.payload.get("usage", {}).get("completion_tokens", 0)))


def measure_truth(target: Target, held_out: Workload, profiles: Sequence[str], draws: range, draft_prompts: int,
                  into: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every held-out prompt on every profile, one draw per number in `draws`; added to `into` when given."""
    found = into or empty_truth(profiles, len(held_out.requests))
    for draw in draws:
        for index in range(len(held_out.requests)):
            truth_step(target, held_out, profiles, draw, index, draft_prompts, found)
    return found


class TruthDuring:
    """The tuner's target, with a truth step after every `every`-th request the tuner sends.

    The tuner's own requests and their wall clocks are untouched (each is timed inside the inner
    target); the truth's steps take box time between them, which the tuner's time budget pays for.
    `finish` completes whole draws up to `min_draws` (a tuner that decided early leaves the truth short).
    """

    def __init__(self, inner: Target, held_out: Workload, profiles: Sequence[str], draft_prompts: int,
                 every: int, found: dict[str, Any] | None = None) -> None:
        self.inner, self.held_out, self.profiles = inner, held_out, tuple(profiles)
        self.draft_prompts, self.every = draft_prompts, every
        self.found = found or empty_truth(profiles, len(held_out.requests))
        self.sent = 0
        self.steps = 0  # truth steps taken: step k is prompt k % count in draw k // count
        self.truth_s = 0.0

    def __getattr__(self, name: str) -> Any:  # concurrent, cheap_switches, vram_bytes, ... as the inner target's
        return getattr(self.inner, name)

    def active(self) -> str | None:
        return self.inner.active()

    def activate(self, profile: str) -> None:
        self.inner.activate(profile)

    def complete(self, body: Mapping[str, Any], in_flight: int = 1) -> Reply:
        reply = self.inner.complete(body, in_flight)
        self.sent += 1
        if self.sent % self.every == 0:
            self.step()
        return reply

    def step(self) -> None:
        serving = self.inner.active()
        started = time.monotonic()
        count = len(self.held_out.requests)
        truth_step(self.inner, self.held_out, self.profiles, self.steps // count, self.steps % count,
                   self.draft_prompts, self.found)
        self.steps += 1
        self.truth_s += time.monotonic() - started
        if serving is not None:
            self.inner.activate(serving)

    def finish(self, min_draws: int) -> dict[str, Any]:
        while self.steps < min_draws * len(self.held_out.requests) or self.steps % len(self.held_out.requests):
            self.step()
        return self.found
