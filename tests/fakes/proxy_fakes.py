"""Test helpers for the proxy: a fake llama-server and servers run in threads on loopback.

`FakeBackendForProxyTests` is not llama-server and not the emulator: it answers just enough of
the OpenAI/llama-server surface (health, models, chat completions with `timings`, /metrics) to
check what the proxy forwards, and can be stopped and started on the same port like a unit
being restarted.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from specd.daemon.service import Server, bind_tcp, make_server, new_event_loop


def eventually(condition: Callable[[], object], what: str, timeout_s: float = 20.0) -> None:
    """Wait until `condition()` is true (polling), or fail naming `what`: a wait on a state, never a guessed delay."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerThread:
    """One server on 127.0.0.1:port in its own thread and event loop: the proxy's own (given a
    `Proxy`, or anything else with its `server(grace_s)`), as the daemon runs it, or uvicorn
    (given an ASGI app)."""

    def __init__(self, app: Any, port: int, *, header_timeout_s: float = 30.0, grace_s: float = 5.0) -> None:
        self.app, self.port, self.header_timeout_s, self.grace_s = app, port, header_timeout_s, grace_s
        self.server: Server | None = None
        self.thread: threading.Thread | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> ServerThread:
        if hasattr(self.app, "server"):
            self.server = self.app.server(grace_s=self.grace_s)
        else:
            self.server = make_server(self.app, host="127.0.0.1", port=self.port, grace_s=self.grace_s,
                                      header_timeout_s=self.header_timeout_s)
        ready = threading.Event()

        def run() -> None:
            self.loop = new_event_loop()
            ready.set()
            assert self.server is not None
            self.loop.run_until_complete(self.server.serve([bind_tcp("127.0.0.1", self.port)]))
            self.loop.close()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        ready.wait()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError(f"server on port {self.port} did not start")
            time.sleep(0.01)
        return self

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run fn in the server's loop (coroutine functions are awaited) and return its result."""
        assert self.loop is not None

        async def invoke() -> Any:
            result = fn()
            if asyncio.iscoroutine(result):
                result = await result
            return result

        return asyncio.run_coroutine_threadsafe(invoke(), self.loop).result(30)

    def stop(self) -> None:
        if self.server is not None and self.thread is not None:
            self.server.should_exit = True
            self.thread.join(15)
            self.server = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class FakeBackendForProxyTests:
    def __init__(self, *, tokens: int = 8, token_delay_s: float = 0.0, alias: str = "fake") -> None:
        self.tokens, self.token_delay_s, self.alias = tokens, token_delay_s, alias
        self.loading = False
        self.drop_stream_after: int | None = None
        self.requests: list[dict[str, Any]] = []
        self.closed_early = 0
        self.loading_answers = 0  # 503 "Loading model" answers given (health or chat)
        self.events_sent = 0  # streamed token events sent, over all streams
        self.abandoned = 0  # requests stalled on purpose whose client (the proxy) hung up
        self.health_polls = 0  # /health requests answered
        self.app = Starlette(routes=[
            Route("/health", self.health),
            Route("/v1/models", self.models),
            Route("/metrics", self.metrics),
            Route("/v1/chat/completions", self.chat, methods=["POST"]),
        ])

    async def health(self, request: Request) -> Response:
        self.health_polls += 1
        if self.loading:
            return self._loading()
        return JSONResponse({"status": "ok"})

    def _loading(self) -> Response:
        self.loading_answers += 1
        return JSONResponse({"error": {"message": "Loading model", "type": "unavailable_error", "code": 503}}, 503)

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": self.alias, "aliases": [self.alias]}]})

    async def metrics(self, request: Request) -> Response:
        done = sum(1 for r in self.requests if r["body"] is not None)
        return PlainTextResponse(
            "# TYPE llamacpp:prompt_tokens_total counter\n"
            f"llamacpp:prompt_tokens_total {10 * done}\n"
            f"llamacpp:tokens_predicted_total {self.tokens * done}\n"
            f"llamacpp:spec_decode_num_draft_tokens_total {4 * done}\n"
            f"llamacpp:spec_decode_num_accepted_tokens_total {3 * done}\n"
        )

    def _timings(self) -> dict[str, Any]:
        return {"prompt_n": 10, "prompt_ms": 5.0, "predicted_n": self.tokens, "predicted_ms": 20.0 * self.tokens,
                "draft_n": 4, "draft_n_accepted": 3}

    async def chat(self, request: Request) -> Response:
        if self.loading:
            return self._loading()
        raw = await request.body()
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):
            body = None
        self.requests.append({"headers": dict(request.headers), "body": body})
        if not isinstance(body, dict):
            return JSONResponse({"error": {"message": "bad json", "type": "invalid_request_error"}}, 400)
        usage = {"prompt_tokens": 10, "completion_tokens": self.tokens, "total_tokens": 10 + self.tokens}
        if isinstance(body.get("x_fake_status"), int):  # a backend that answers an error or garbage
            return Response(str(body.get("x_fake_raw", "")).encode(), status_code=body["x_fake_status"],
                            media_type="application/json")
        if body.get("x_fake_hang_before_answer"):  # a backend that accepted the request and went silent
            while not await request.is_disconnected():
                await asyncio.sleep(0.02)
            self.abandoned += 1
            return Response(status_code=500)
        if not body.get("stream"):
            await asyncio.sleep(self.token_delay_s * self.tokens)
            return JSONResponse({
                "object": "chat.completion", "model": self.alias, "usage": usage, "timings": self._timings(),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "x" * self.tokens},
                             "finish_reason": "stop"}],
            })
        hang_after = body.get("x_fake_hang_after")
        return StreamingResponse(self._events(usage, hang_after if isinstance(hang_after, int) else None),
                                 media_type="text/event-stream")

    async def _events(self, usage: dict[str, Any], hang_after: int | None = None) -> AsyncIterator[bytes]:
        def event(document: dict[str, Any]) -> bytes:
            return b"data: " + json.dumps(document).encode() + b"\n\n"

        try:
            yield event({"choices": [{"index": 0, "delta": {"role": "assistant", "content": None}}]})
            for index in range(self.tokens):
                if self.drop_stream_after is not None and index == self.drop_stream_after:
                    raise ConnectionResetError("fake backend drops the stream")
                if index == hang_after:  # a stuck slot: the connection stays open, nothing more comes
                    await asyncio.sleep(3600)
                await asyncio.sleep(self.token_delay_s)
                yield event({"choices": [{"index": 0, "delta": {"content": f"t{index}"}}]})
                self.events_sent += 1
            yield event({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": usage,
                         "timings": self._timings()})
            yield b"data: [DONE]\n\n"
        except asyncio.CancelledError:
            self.closed_early += 1
            raise


def chat_body(text: str = "Write a python function that adds two numbers", *, stream: bool = False,
              **extra: Any) -> dict[str, Any]:
    return {"model": "fake", "messages": [{"role": "user", "content": text}], "stream": stream, **extra}


def read_stream(client: Any, url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> list[str]:
    """The `data:` payloads of a streamed response, in order; raises if the body is not complete."""
    payloads: list[str] = []
    with client.stream("POST", url, json=body, headers=headers or {}) as response:
        response.raise_for_status()
        buffer = ""
        for text in response.iter_text():
            buffer += text
        for event in buffer.split("\n\n"):
            if event.startswith("data: "):
                payloads.append(event[6:])
        if not buffer.endswith("\n\n"):
            raise AssertionError(f"stream ended mid-event: {buffer[-80:]!r}")
    return payloads
