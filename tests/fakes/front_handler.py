"""A small handler in place of the proxy, for tests of the proxy's HTTP/1.1 server alone
(specd.proxy.http1.server): each path is one behaviour a handler may show."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from specd.proxy.http1.listener import FrontServer
from specd.proxy.http1.responder import Responder
from specd.proxy.http1.server import ClientRequest, FrontLimits

LIMITS = FrontLimits(max_body_bytes=1 << 20, body_timeout_s=5.0, header_timeout_s=5.0)


async def _headers(request: ClientRequest, responder: Responder) -> None:
    """The request as the handler got it, as JSON: method, target, path, headers, body length."""
    seen = {"method": request.method, "target": request.target.decode("latin-1"), "path": request.path,
            "headers": [[k.decode("latin-1"), v.decode("latin-1")] for k, v in request.headers],
            "body": request.body.decode("latin-1")}
    responder.answer(200, [(b"content-type", b"application/json")], json.dumps(seen).encode())


async def _raise(request: ClientRequest, responder: Responder) -> None:
    raise RuntimeError("a handler's bug")


async def _raise_mid_stream(request: ClientRequest, responder: Responder) -> None:
    responder.start(200, [(b"content-type", b"text/plain")])
    responder.write(b"part")
    await asyncio.sleep(0)
    raise RuntimeError("a handler's bug after the first part")


async def _no_answer(request: ClientRequest, responder: Responder) -> None:
    return None


async def _start_only(request: ClientRequest, responder: Responder) -> None:
    responder.start(200, [(b"content-type", b"text/plain")])
    responder.write(b"part")


async def _double_start(request: ClientRequest, responder: Responder) -> None:
    responder.start(200, [])
    responder.start(200, [])


async def _no_content(request: ClientRequest, responder: Responder) -> None:
    responder.answer(204, [(b"x-kind", b"whole")], b"")


async def _no_content_stream(request: ClientRequest, responder: Responder) -> None:
    responder.start(204, [(b"x-kind", b"stream")])
    responder.write(b"nothing may follow a 204")
    responder.end()


async def _write_after_end(request: ClientRequest, responder: Responder) -> None:
    responder.start(200, [])
    responder.end(b"end")
    responder.write(b"after the end")
    responder.end(b"twice")


async def _cancelled(request: ClientRequest, responder: Responder) -> None:
    """A handler whose task is cancelled from outside before it answered (what the proxy's request task does
    when a cancel it does not expect reaches it: it re-raises, and the task ends cancelled)."""
    task = asyncio.current_task()
    assert task is not None
    task.cancel()
    await asyncio.sleep(0)


async def _unicode_header(request: ClientRequest, responder: Responder) -> None:
    responder.answer(200, [(b"key", "<\t µ>".encode())], b"Hello, world")


EXTRA: dict[str, Callable[[ClientRequest, Responder], Awaitable[None]]] = {
    "/raise": _raise, "/raise-mid-stream": _raise_mid_stream, "/no-answer": _no_answer,
    "/start-only": _start_only, "/double-start": _double_start, "/no-content": _no_content,
    "/no-content-stream": _no_content_stream, "/write-after-end": _write_after_end,
    "/unicode-header": _unicode_header, "/cancelled": _cancelled,
}


class HandlerForFrontTests:
    """Answers by path: /echo (the body back, whole), /answer-then-finish-late (answers, then returns
    only when the test sets `finish`), /late (headers, then a part once the test sets `release`),
    /stream (N parts, N from the query), /hold (never answers; notes when the client leaves),
    /slow-reader (parts until paused, counting pauses)."""

    def __init__(self, limits: FrontLimits = LIMITS) -> None:
        self.limits = limits
        self.seen: list[ClientRequest] = []
        self.finish: concurrent.futures.Future[None] = concurrent.futures.Future()
        self.release: concurrent.futures.Future[None] = concurrent.futures.Future()
        self.left = threading.Event()
        self.paused = 0
        self.resumed = 0

    def server(self, grace_s: float) -> FrontServer:
        return FrontServer(self.take, self.limits, grace_s=grace_s, on_stop=self._stopped)

    def take(self, request: ClientRequest, responder: Responder) -> Coroutine[Any, Any, None]:
        """What the server calls, as it calls the proxy's `handle`: the coroutine of the answer, made at once;
        /raise-at-once is a bug in that call itself, before any coroutine."""
        if request.path == "/raise-at-once":
            raise RuntimeError("a bug before the handler's task")
        return self.handle(request, responder)

    async def _stopped(self) -> None:
        pass

    @staticmethod
    async def _bug(path: str, responder: Responder) -> None:
        """A handler's bug: before any answer (/raise), or after its answer began (/raise-mid-stream)."""
        if path == "/raise-mid-stream":
            responder.start(200, [(b"content-type", b"text/event-stream")])
            responder.write(b"data: 0\n\n")
            await asyncio.sleep(0)
            raise RuntimeError("a bug in the middle of a stream")
        raise RuntimeError("a bug in the handler")

    async def handle(self, request: ClientRequest, responder: Responder) -> None:
        self.seen.append(request)
        path = request.path
        if path == "/echo":
            responder.answer(200, [(b"content-type", b"application/octet-stream")], request.body)
        elif path in ("/raise", "/raise-mid-stream"):
            await self._bug(path, responder)
        elif path == "/late":
            responder.start(200, [(b"content-type", b"text/plain")])
            await asyncio.wrap_future(self.release)
            responder.end(b"late part")
        elif path == "/stream":
            parts = int(request.target.partition(b"n=")[2] or b"3")
            responder.start(200, [(b"content-type", b"text/event-stream")])
            for index in range(parts):
                responder.write(b"data: %d\n\n" % index)
                await asyncio.sleep(0)
            responder.end()
        elif path == "/hold":
            gone = asyncio.get_running_loop().create_future()
            responder.on_leave(lambda: gone.set_result(None))
            await gone
            self.left.set()
        elif path == "/slow-reader":
            await self._slow_reader(responder)
        elif path == "/throttled":  # 512 parts of 64 KiB (32 MiB: more than the socket buffers), at the client's pace
            await self._slow_reader(responder, 512)
        elif path == "/answer-then-finish-late":  # answered, and the handler still busy after that
            responder.answer(200, [(b"content-type", b"text/plain")], b"done")
            await asyncio.wrap_future(self.finish)
        elif "/headers" in path:  # any path with it: the request as seen, whatever its form
            await _headers(request, responder)
        elif path in EXTRA:
            await EXTRA[path](request, responder)
        else:
            responder.error(404, "no such path")

    async def _slow_reader(self, responder: Responder, parts: int = 4096) -> None:
        responder.start(200, [(b"content-type", b"application/octet-stream")])
        flowing = asyncio.Event()
        flowing.set()

        def pause() -> None:
            self.paused += 1
            flowing.clear()

        def resume() -> None:
            self.resumed += 1
            flowing.set()

        responder.throttle(pause, resume)
        for _ in range(parts):  # 256 MiB by default, if nothing paused it
            await flowing.wait()
            responder.write(b"x" * 65536)
            await asyncio.sleep(0)
        responder.end()
