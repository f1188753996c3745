"""specd-emulator: a llama-server *performance emulator*, not a real server.

It takes llama-server's command line (so a specd profile can name it as its `binary`), answers
llama-server's endpoints in llama-server's shapes, and takes as long as the performance model in
specd.emulator.model says the modelled GPU would, times --emulator-time-scale. That lets switch,
daemon, bench and tuner be exercised end to end on a box without a GPU or a model. This module is
the command line and the HTTP side; the modelled state (slots, batching) is specd.emulator.engine.
"""

from __future__ import annotations

import json
import math
import sys
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from specd.emulator.engine import Emulator, Plan, ServerOptions, log
from specd.emulator.model import (
    load_model,
    mode_for_spec_types,
    output_pieces,
    prompt_text,
    requested_tokens,
    timings_json,
)
from specd.emulator.options import OPTIONS_BY_NAME, help_text
from specd.errors import SpecdError, UsageError

VERSION_TEXT = ("version: 0 (emulator)\n"
                "built as specd-emulator, a llama-server performance emulator (not a real server)")


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
        per_request_draft=seen.get("--emulator-per-request-draft") == "1",
        show_help="--help" in seen,
        show_version="--version" in seen,
    )


@dataclass(frozen=True)
class Shape:
    """The OpenAI shape an answer takes: a chat completion's message, or a text completion's text."""

    text: bool

    @property
    def object(self) -> str:
        return "text_completion" if self.text else "chat.completion"

    @property
    def chunk_object(self) -> str:
        return "text_completion" if self.text else "chat.completion.chunk"

    @property
    def id_prefix(self) -> str:
        return "cmpl" if self.text else "chatcmpl"

    def content(self, text: str) -> dict[str, Any]:
        return {"text": text} if self.text else {"message": {"role": "assistant", "content": text}}

    def delta(self, piece: str) -> dict[str, Any]:
        if self.text:
            return {"text": piece}
        return {"delta": {"content": piece} if piece else {}}


def _error(code: int, message: str, kind: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message, "type": kind}}, status_code=code)


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

    def read_prompt(body: Any, text: bool) -> tuple[list[dict[str, Any]], str] | JSONResponse:
        """(the messages the plan classifies, the text a slot caches), or the 400 llama-server answers."""
        if text:  # /v1/completions: a prompt string, classified as one user message
            prompt = body.get("prompt") if isinstance(body, dict) else None
            if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
                prompt = prompt[0]
            if not isinstance(prompt, str) or not prompt:
                return _error(400, "'prompt' must be a non-empty string", "invalid_request_error")
            return [{"role": "user", "content": prompt}], prompt
        messages = body.get("messages") if isinstance(body, dict) else None
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            return _error(400, "'messages' must be a non-empty list of message objects", "invalid_request_error")
        return messages, prompt_text(messages)

    async def answer(request: Request, text: bool) -> Response:
        """A chat completion, or (`text`) a text completion: the same plan, llama-server's two shapes."""
        refused = guard(request)
        if refused:
            return refused
        try:
            body = json.loads(await request.body())
        except ValueError as exc:
            return _error(400, f"invalid JSON body: {exc}", "invalid_request_error")
        read = read_prompt(body, text)
        if isinstance(read, JSONResponse):
            return read
        messages, prompt = read
        prompt_tokens = math.ceil(len(prompt) / emulator.model.chars_per_token)
        if prompt_tokens > options.ctx_size:
            return _error(400, f"request ({prompt_tokens} tokens) exceeds the available context size "
                          f"({options.ctx_size} tokens), try increasing it", "exceed_context_size_error")
        max_tokens = requested_tokens(body, emulator.model.default_max_tokens)
        finish = "length" if requested_tokens(body, -1) >= 0 else "stop"
        slot = await emulator.acquire(prompt)
        own_n_max = body.get("speculative.n_max")
        plan = emulator.plan(slot, messages, prompt, max_tokens, body.get("cache_prompt") is not False,
                             own_n_max if isinstance(own_n_max, int) and not isinstance(own_n_max, bool) else None)
        pieces = output_pieces(max_tokens, plan.task_class)
        shape = Shape(text)
        base = {"id": f"{shape.id_prefix}-{uuid.uuid4().hex[:24]}", "created": int(time.time()),
                "model": options.aliases[0], "system_fingerprint": "b0-emulator"}
        usage = {"completion_tokens": max_tokens, "prompt_tokens": prompt_tokens,
                 "total_tokens": prompt_tokens + max_tokens}
        if not body.get("stream"):
            try:
                await emulator.sleep_ms(plan.timing.prompt_ms)
                decoded_ms = 0.0
                async for step in emulator.decode(plan, time.monotonic()):
                    decoded_ms = step[2]
                plan = replace(plan, timing=replace(plan.timing, predicted_ms=decoded_ms))
                emulator.record(plan, prompt, "".join(pieces))
            finally:
                await emulator.release(slot)
            return JSONResponse({**base, "object": shape.object, "usage": usage,
                                 "timings": timings_json(plan.timing),
                                 "choices": [{"index": 0, "finish_reason": finish, **shape.content("".join(pieces))}]})
        return StreamingResponse(stream(plan, pieces, base, usage, finish, prompt, shape),
                                 media_type="text/event-stream")

    async def stream(plan: Plan, pieces: list[str], base: dict[str, Any], usage: dict[str, int], finish: str,
                     prompt: str, shape: Shape) -> AsyncIterator[str]:
        def event(choice: dict[str, Any], **extra: Any) -> str:
            chunk = {**base, "object": shape.chunk_object, "choices": [{"index": 0, **choice}], **extra}
            return f"data: {json.dumps(chunk, separators=(',', ':'))}\n\n"

        try:
            await emulator.sleep_ms(plan.timing.prompt_ms)
            if not shape.text:
                yield event({"finish_reason": None, "delta": {"role": "assistant", "content": None}})
            decoded_ms = 0.0
            async for first, end, modelled_ms in emulator.decode(plan, time.monotonic()):
                for piece in pieces[first:end]:
                    yield event({"finish_reason": None, **shape.delta(piece)})
                decoded_ms = modelled_ms
            plan = replace(plan, timing=replace(plan.timing, predicted_ms=decoded_ms))
            emulator.record(plan, prompt, "".join(pieces))
            final = {"finish_reason": finish, **shape.delta("")}
            yield event(final, usage=usage, timings=timings_json(plan.timing))
            yield "data: [DONE]\n\n"
        finally:
            await emulator.release(plan.slot)

    async def chat(request: Request) -> Response:
        return await answer(request, text=False)

    async def completion(request: Request) -> Response:
        return await answer(request, text=True)

    routes = [
        Route("/health", health), Route("/v1/health", health),
        Route("/v1/models", models), Route("/models", models),
        Route("/props", props), Route("/metrics", metrics), Route("/slots", slots),
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/chat/completions", chat, methods=["POST"]),
        Route("/v1/completions", completion, methods=["POST"]),
        Route("/completions", completion, methods=["POST"]),
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
