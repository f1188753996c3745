"""The emulator's modelled server state: slots and their prompt caches, planning a request, decoding it
under continuous batching, and llama-server's /metrics counters (the HTTP side is specd.emulator.server).

Decoding is modelled as continuous batching: a request's tokens come out slice by slice at the
per-stream rate for the requests in flight *during* that slice, so eight requests that arrive
together all decode at the eight-in-flight rate, as on a real server, rather than the first one
at the single-stream rate because it was planned before the others arrived.
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from specd.emulator.model import (
    EmulatorModel,
    ModeModel,
    RequestTiming,
    decode_rate,
    plan_request,
    prometheus_text,
)
from specd.traffic.taskclass import TaskClass, asks_to_repeat, classify, last_user_text


@dataclass(frozen=True)
class ServerOptions:
    """What the command line asked for; flags with no modelled effect are accepted and dropped."""

    model_path: str = "emulated-model.gguf"
    aliases: tuple[str, ...] = ()
    host: str = "127.0.0.1"
    port: int = 8080
    ctx_size: int = 131072
    parallel: int = 4
    mode: str = "none"
    draft_n_max: int | None = None
    metrics: bool = False
    api_key: str | None = None
    seed: int = -1
    emulator_config: str | None = None
    time_scale: float = 1.0
    per_request_draft: bool = False  # honour a request's speculative.n_max, as older llama-server builds did
    show_help: bool = False
    show_version: bool = False


def log(message: str) -> None:
    print(f"specd-emulator: {message}", file=sys.stderr, flush=True)


@dataclass
class Slot:
    """One llama-server slot; its cached text is what the next request can reuse."""

    id: int
    text: str = ""
    busy: bool = False
    last_used: float = 0.0


DECODE_SLICE_S = 0.02  # real seconds per decode slice: the in-flight count is looked at this often


@dataclass(frozen=True)
class Plan:
    task_class: TaskClass
    timing: RequestTiming  # predicted_ms as if the requests in flight at the start stayed for its whole decode
    slot: Slot
    in_flight: int
    repeats_input: bool = False
    decode_noise: float = 1.0
    mode: ModeModel | None = None  # the mode this request decodes in (a per-request n_max of 0: plain)
    draft_n_max: int | None = None


class Emulator:
    """Server state: the modelled mode, the slots, /metrics counters and the seeded timing noise."""

    def __init__(self, options: ServerOptions, model: EmulatorModel, mode: ModeModel) -> None:
        self.options = options
        self.model = model
        self.mode = mode
        self.ready_at = time.monotonic() + mode.load_time_s * options.time_scale
        self.rng = random.Random(options.seed if options.seed >= 0 else model.seed)
        self.slots = [Slot(i) for i in range(options.parallel)]
        self.slot_free = asyncio.Condition()
        self.counters: dict[str, float] = dict.fromkeys(
            ("prompt_tokens_total", "prompt_tokens_cached_total", "prompt_seconds_total",
             "tokens_predicted_total", "tokens_predicted_seconds_total", "n_decode_total", "n_tokens_max",
             "spec_decode_num_draft_tokens_total",
             "spec_decode_num_accepted_tokens_total", "spec_decode_num_drafts_total"), 0.0)
        self.deferred = 0

    def loading(self) -> bool:
        return time.monotonic() < self.ready_at

    def noise(self) -> float:
        sigma = self.model.noise_sigma
        return math.exp(self.rng.gauss(0.0, sigma)) if sigma > 0 else 1.0

    async def acquire(self, prompt: str) -> Slot:
        """The free slot sharing the longest prefix with `prompt` (ties: least recently used)."""
        async with self.slot_free:
            if all(s.busy for s in self.slots):
                self.deferred += 1
                await self.slot_free.wait_for(lambda: not all(s.busy for s in self.slots))
                self.deferred -= 1
            free = [s for s in self.slots if not s.busy]
            slot = max(free, key=lambda s: (len(os.path.commonprefix([s.text, prompt])), -s.last_used))
            slot.busy = True
            return slot

    async def release(self, slot: Slot) -> None:
        async with self.slot_free:
            slot.busy = False
            slot.last_used = time.monotonic()
            self.slot_free.notify_all()

    def plan(self, slot: Slot, messages: list[dict[str, Any]], prompt: str, max_tokens: int,
             cache_prompt: bool = True, draft_n_max: int | None = None) -> Plan:
        """`draft_n_max`: the request's own speculative.n_max (only with --emulator-per-request-draft)."""
        task_class = classify(messages)
        n_max = draft_n_max if self.options.per_request_draft and draft_n_max is not None else self.options.draft_n_max
        mode = self.model.mode("none") if n_max == 0 and self.mode.speculative else self.mode
        cpt = self.model.chars_per_token
        in_flight = sum(s.busy for s in self.slots)
        repeats = asks_to_repeat(last_user_text(messages))
        prefill_noise, decode_noise = self.noise(), self.noise()
        timing = plan_request(
            mode, prompt_tokens=max(1, math.ceil(len(prompt) / cpt)),
            cache_n=int(len(os.path.commonprefix([slot.text, prompt])) / cpt) if cache_prompt else 0,
            output_tokens=max_tokens,
            task_class=task_class, in_flight=in_flight, repeats_input=repeats,
            draft_n_max=n_max, prefill_noise=prefill_noise, decode_noise=decode_noise,
        )
        return Plan(task_class, timing, slot, in_flight, repeats, decode_noise, mode, n_max)

    async def decode(self, plan: Plan, started: float) -> AsyncIterator[tuple[int, int, float]]:
        """Decode slice by slice from `started` (monotonic, after prefill): yields (first token, end,
        modelled decode ms so far), each slice at the rate for the requests in flight during it."""
        tokens, scale = plan.timing.predicted_n, self.options.time_scale
        done, modelled_ms = 0, 0.0
        while done < tokens:
            in_flight = sum(s.busy for s in self.slots)
            rate = decode_rate(plan.mode or self.mode, tokens, plan.task_class, in_flight, plan.repeats_input,
                               plan.draft_n_max)
            step = tokens - done if scale <= 0 else max(1, min(tokens - done, math.ceil(rate * DECODE_SLICE_S / scale)))
            modelled_ms += 1000.0 * step / rate * plan.decode_noise
            if scale > 0:
                delay = started + modelled_ms / 1000.0 * scale - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            yield done, done + step, modelled_ms
            done += step

    def record(self, plan: Plan, prompt: str, output: str) -> None:
        t, c = plan.timing, self.counters
        c["prompt_tokens_total"] += t.prompt_n
        c["prompt_tokens_cached_total"] += t.cache_n
        c["prompt_seconds_total"] += t.prompt_ms / 1000.0
        c["tokens_predicted_total"] += t.predicted_n
        c["tokens_predicted_seconds_total"] += t.predicted_ms / 1000.0
        c["n_tokens_max"] = max(c["n_tokens_max"], t.prompt_n + t.cache_n + t.predicted_n)
        accepted = t.draft_n_accepted or 0
        c["n_decode_total"] += 1 + t.predicted_n - accepted
        if t.draft_n:
            c["spec_decode_num_draft_tokens_total"] += t.draft_n
            c["spec_decode_num_accepted_tokens_total"] += accepted
            c["spec_decode_num_drafts_total"] += t.predicted_n - accepted
        plan.slot.text = prompt + output
        log(f"slot {plan.slot.id} | class={plan.task_class} in_flight={plan.in_flight} prompt_n={t.prompt_n} "
            f"cache_n={t.cache_n} predicted_n={t.predicted_n} modelled_ms={t.wall_ms:.0f}")

    async def sleep_ms(self, modelled_ms: float) -> None:
        if self.options.time_scale > 0 and modelled_ms > 0:
            await asyncio.sleep(modelled_ms / 1000.0 * self.options.time_scale)

    def metrics_text(self) -> str:
        c = self.counters
        gauges = {
            "prompt_tokens_seconds": c["prompt_tokens_total"] / (c["prompt_seconds_total"] or math.inf),
            "predicted_tokens_seconds":
                c["tokens_predicted_total"] / (c["tokens_predicted_seconds_total"] or math.inf),
            "requests_processing": float(sum(s.busy for s in self.slots)),
            "requests_deferred": float(self.deferred),
        }
        return prometheus_text(c, gauges)


