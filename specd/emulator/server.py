"""specd-emulator: a llama-server *performance emulator*, not a real server.

It takes llama-server's command line (so a specd profile can name it as its `binary`), answers
llama-server's endpoints in llama-server's shapes, and takes as long as the performance model in
specd.emulator.model says the modelled GPU would, times --emulator-time-scale. That lets switch,
daemon, bench and tuner be exercised end to end on a box without a GPU or a model.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import sys
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from specd.emulator.model import (
    OPTIONS_BY_NAME,
    EmulatorModel,
    ModeModel,
    RequestTiming,
    asks_to_repeat,
    help_text,
    load_model,
    mode_for_spec_types,
    output_pieces,
    plan_request,
    prometheus_text,
    prompt_text,
    requested_tokens,
    timings_json,
)
from specd.errors import SpecdError, UsageError
from specd.traffic.taskclass import TaskClass, classify, last_user_text

VERSION_TEXT = ("version: 0 (emulator)\n"
                "built as specd-emulator, a llama-server performance emulator (not a real server)")


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
    show_help: bool = False
    show_version: bool = False


def _int(flag: str, value: str, minimum: int | None = None) -> int:
    try:
        number = int(value)
    except ValueError:
        raise UsageError(f"invalid value for {flag}: {value!r} (expected an integer)") from None
    if minimum is not None and number < minimum:
        raise UsageError(f"invalid value for {flag}: {value} (must be at least {minimum})")
    return number


def parse_args(argv: Sequence[str]) -> ServerOptions:
    """llama-server's rules: every token is a known flag or a flag's value; anything else is fatal."""
    seen: dict[str, str] = {}
    args = list(argv)
    index = 0
    while index < len(args):
        token = args[index]
        name, _, inline = token.partition("=") if token.startswith("--") else (token, "", "")
        if name not in OPTIONS_BY_NAME:
            raise UsageError(f"invalid argument: {token}")
        option = OPTIONS_BY_NAME[name]
        if option.hint and not inline:
            if index + 1 >= len(args):
                raise UsageError(f"expected value for argument: {token}")
            index += 1
            inline = args[index]
        negated = name.startswith(("--no-", "-no"))
        seen[option.canonical] = inline if option.hint else ("0" if negated else "1")
        index += 1
    spec_types = [t for t in seen.get("--spec-type", "none").split(",") if t]
    scale = seen.get("--emulator-time-scale", "1")
    try:
        time_scale = float(scale)
    except ValueError:
        raise UsageError(f"invalid value for --emulator-time-scale: {scale!r}") from None
    if not time_scale >= 0.0 or math.isinf(time_scale):
        raise UsageError(f"invalid value for --emulator-time-scale: {scale} (must be a finite number >= 0)")
    parallel = _int("--parallel", seen.get("--parallel", "-1"), -1)
    ctx = _int("--ctx-size", seen.get("--ctx-size", "0"), 0)
    model = seen.get("--model", "emulated-model.gguf")
    n_max = seen.get("--spec-draft-n-max")
    return ServerOptions(
        model_path=model,
        aliases=tuple(a for a in seen.get("--alias", "").split(",") if a) or (model,),
        host=seen.get("--host", "127.0.0.1").split(",")[0],
        port=_int("--port", seen.get("--port", "8080"), 0),
        ctx_size=ctx or 131072,
        parallel=4 if parallel in (-1, 0) else parallel,
        mode=mode_for_spec_types(spec_types, "--spec-draft-model" in seen),
        draft_n_max=None if n_max is None else _int("--spec-draft-n-max", n_max, 0),
        metrics=seen.get("--metrics") == "1",
        api_key=seen.get("--api-key"),
        seed=_int("--seed", seen.get("--seed", "-1")),
        emulator_config=seen.get("--emulator-config"),
        time_scale=time_scale,
        show_help="--help" in seen,
        show_version="--version" in seen,
    )


def log(message: str) -> None:
    print(f"specd-emulator: {message}", file=sys.stderr, flush=True)


def _error(code: int, message: str, kind: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message, "type": kind}}, status_code=code)


@dataclass
class Slot:
    """One llama-server slot; its cached text is what the next request can reuse."""

    id: int
    text: str = ""
    busy: bool = False
    last_used: float = 0.0


@dataclass(frozen=True)
class Plan:
    task_class: TaskClass
    timing: RequestTiming
    slot: Slot
    in_flight: int


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
             cache_prompt: bool = True) -> Plan:
        task_class = classify(messages)
        cpt = self.model.chars_per_token
        in_flight = sum(s.busy for s in self.slots)
        timing = plan_request(
            self.mode, prompt_tokens=max(1, math.ceil(len(prompt) / cpt)),
            cache_n=int(len(os.path.commonprefix([slot.text, prompt])) / cpt) if cache_prompt else 0,
            output_tokens=max_tokens,
            task_class=task_class, in_flight=in_flight,
            repeats_input=asks_to_repeat(last_user_text(messages)),
            draft_n_max=self.options.draft_n_max, prefill_noise=self.noise(), decode_noise=self.noise(),
        )
        return Plan(task_class, timing, slot, in_flight)

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


def build_app(emulator: Emulator) -> Starlette:  # noqa: C901 - predates the complexity gate; split when next changed
    options = emulator.options
    created = int(time.time())

    def guard(request: Request) -> JSONResponse | None:
        if options.api_key and request.headers.get("authorization") != f"Bearer {options.api_key}":
            return _error(401, "Invalid API Key", "authentication_error")
        if emulator.loading():
            return _error(503, "Loading model", "unavailable_error")
        return None

    async def health(request: Request) -> Response:
        if emulator.loading():
            return _error(503, "Loading model", "unavailable_error")
        return JSONResponse({"status": "ok"})

    async def models(request: Request) -> Response:
        meta = {"emulator": True, "n_ctx_train": options.ctx_size}
        first = options.aliases[0]
        return guard(request) or JSONResponse({
            "object": "list",
            "data": [{"id": first, "aliases": list(options.aliases), "object": "model", "created": created,
                      "owned_by": "llamacpp", "meta": meta}],
            "models": [{"name": first, "model": first, "type": "model", "details": {"format": "gguf"}}],
        })

    async def props(request: Request) -> Response:
        return guard(request) or JSONResponse({
            "emulator": True, "model_alias": options.aliases[0], "model_path": options.model_path,
            "total_slots": options.parallel, "build_info": "b0-emulator", "chat_template": "",
            "default_generation_settings": {"n_ctx": options.ctx_size, "params": {"n_predict": -1}},
            "speculative_mode": emulator.mode.name, "emulator_config": str(emulator.model.path),
            "emulator_time_scale": options.time_scale,
        })

    async def metrics(request: Request) -> Response:
        if not options.metrics:
            return _error(501, "This server does not support metrics endpoint. Start it with `--metrics`",
                          "not_supported_error")
        text = emulator.metrics_text()
        return guard(request) or PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    async def slots(request: Request) -> Response:
        return guard(request) or JSONResponse(
            [{"id": s.id, "n_ctx": options.ctx_size, "is_processing": s.busy} for s in emulator.slots])

    async def chat(request: Request) -> Response:
        refused = guard(request)
        if refused:
            return refused
        try:
            body = json.loads(await request.body())
        except ValueError as exc:
            return _error(400, f"invalid JSON body: {exc}", "invalid_request_error")
        messages = body.get("messages") if isinstance(body, dict) else None
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            return _error(400, "'messages' must be a non-empty list of message objects",
                          "invalid_request_error")
        prompt = prompt_text(messages)
        prompt_tokens = math.ceil(len(prompt) / emulator.model.chars_per_token)
        if prompt_tokens > options.ctx_size:
            return _error(400, f"request ({prompt_tokens} tokens) exceeds the available context size "
                          f"({options.ctx_size} tokens), try increasing it", "exceed_context_size_error")
        max_tokens = requested_tokens(body, emulator.model.default_max_tokens)
        finish = "length" if requested_tokens(body, -1) >= 0 else "stop"
        slot = await emulator.acquire(prompt)
        plan = emulator.plan(slot, messages, prompt, max_tokens, body.get("cache_prompt") is not False)
        pieces = output_pieces(max_tokens, plan.task_class)
        base = {"id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "created": int(time.time()),
                "model": options.aliases[0], "system_fingerprint": "b0-emulator"}
        usage = {"completion_tokens": max_tokens, "prompt_tokens": prompt_tokens,
                 "total_tokens": prompt_tokens + max_tokens}
        if not body.get("stream"):
            try:
                await emulator.sleep_ms(plan.timing.wall_ms)
                emulator.record(plan, prompt, "".join(pieces))
            finally:
                await emulator.release(slot)
            return JSONResponse({**base, "object": "chat.completion", "usage": usage,
                                 "timings": timings_json(plan.timing), "choices": [
                                     {"index": 0, "finish_reason": finish,
                                      "message": {"role": "assistant", "content": "".join(pieces)}}]})
        return StreamingResponse(stream(plan, pieces, base, usage, finish, prompt),
                                 media_type="text/event-stream")

    async def stream(plan: Plan, pieces: list[str], base: dict[str, Any], usage: dict[str, int], finish: str,
                     prompt: str) -> AsyncIterator[str]:
        def event(choice: dict[str, Any], **extra: Any) -> str:
            chunk = {**base, "object": "chat.completion.chunk", "choices": [{"index": 0, **choice}], **extra}
            return f"data: {json.dumps(chunk, separators=(',', ':'))}\n\n"

        try:
            await emulator.sleep_ms(plan.timing.prompt_ms)
            yield event({"finish_reason": None, "delta": {"role": "assistant", "content": None}})
            per_token_s = plan.timing.predicted_ms / max(len(pieces), 1) / 1000.0 * options.time_scale
            start = time.monotonic()
            for index, piece in enumerate(pieces):
                delay = start + (index + 1) * per_token_s - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                yield event({"finish_reason": None, "delta": {"content": piece}})
            emulator.record(plan, prompt, "".join(pieces))
            final = {"finish_reason": finish, "delta": {}}
            yield event(final, usage=usage, timings=timings_json(plan.timing))
            yield "data: [DONE]\n\n"
        finally:
            await emulator.release(plan.slot)

    routes = [
        Route("/health", health), Route("/v1/health", health),
        Route("/v1/models", models), Route("/models", models),
        Route("/props", props), Route("/metrics", metrics), Route("/slots", slots),
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/chat/completions", chat, methods=["POST"]),
    ]
    return Starlette(routes=routes)


def run(argv: Sequence[str]) -> int:
    """Parse like llama-server, load the performance model, serve until stopped; the exit status."""
    try:
        options = parse_args(argv)
        if options.show_help:
            sys.stdout.write(help_text())
            return 0
        if options.show_version:
            print(VERSION_TEXT, file=sys.stderr)
            return 0
        model = load_model(options.emulator_config)
        mode = model.mode(options.mode)
    except SpecdError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    emulator = Emulator(options, model, mode)
    log(f"llama-server performance emulator, not a real server | {model.name} | mode {mode.name} | "
        f"config {model.path} | time scale {options.time_scale:g} | {options.parallel} slots")
    log(f"server is listening on http://{options.host}:{options.port} (emulated model loads for "
        f"{mode.load_time_s * options.time_scale:.2f} s)")
    config = uvicorn.Config(build_app(emulator), host=options.host, port=options.port, log_level="warning",
                            access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    server.run()
    return 0 if server.started else 1


def main() -> None:
    sys.exit(run(sys.argv[1:]))


if __name__ == "__main__":
    main()
