"""The FAKE proxies benchmarks/proxy_overhead.py measures beside specd's and nginx.

    python benchmarks/forwarders.py bare|front|uvicorn PORT BACKEND_PORT

`bare` (`serve_bare_forwarder_for_benchmark`) only copies bytes both ways on asyncio + httptools:
the floor of a Python proxy on the machine. `front` and `uvicorn` differ only in their server half.
Both forward every request to the backend with the proxy's own upstream client
(specd.proxy.http1.client.UpstreamPool: pooled keep-alive connections, the body handed part by
part to a sink) and relay the answer as it comes; neither has the gate, the re-send rule or the
recording, so the difference between them is the server half alone:

- `front`: the proxy's hand-written server (specd.proxy.http1: FrontServer, a Responder), the
  request sent upstream in the same callback that completes it (`send_now`) and each body part
  written to the client from the backend connection's callback, as specd's proxy does;
- `uvicorn`: uvicorn's `HttpToolsProtocol` (httptools too, on uvloop) with a raw ASGI app: the
  request sent upstream as soon as `receive()` gave the body, the parts passed through an
  asyncio.Queue to the app's `send()` — the ordinary way an ASGI app streams.

The issue's question (32): is the maintained server within 0.05 ms of added TTFT p50? If so, the
hand-written server half goes and the client stays.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any, ClassVar

from specd.proxy.http1.client import UpstreamPool, forwarded_headers, response_headers
from specd.proxy.http1.listener import FrontServer
from specd.proxy.http1.responder import Responder
from specd.proxy.http1.response import UpstreamFailed, UpstreamResponse
from specd.proxy.http1.server import ClientRequest, FrontLimits


class _WriteThrough:
    """A sink that writes each body part to the client from the backend connection's callback."""

    def __init__(self, responder: Responder, done: asyncio.Future[None]) -> None:
        self._responder, self._done = responder, done

    def on_data(self, data: bytes) -> None:
        self._responder.write(data)

    def on_end(self) -> None:
        self._responder.end()
        if not self._done.done():
            self._done.set_result(None)

    def on_error(self, exc: BaseException) -> None:
        self.on_end()


def serve_front_forwarder_for_benchmark(port: int, backend_port: int) -> None:
    import uvloop

    base = f"http://127.0.0.1:{backend_port}"
    pool = UpstreamPool()

    def handle(request: ClientRequest, responder: Responder) -> Any:
        headers = forwarded_headers(request.headers)
        sent = pool.send_now(request.method, base, request.target, headers, request.body)
        return relay(request, responder, headers, sent)

    async def relay(request: ClientRequest, responder: Responder, headers: bytes,
                    sent: UpstreamResponse | None) -> None:
        try:
            if sent is None:
                upstream = await pool.send(request.method, base, request.target, headers, request.body, None)
            else:
                await sent.started()
                upstream = sent
        except UpstreamFailed:
            responder.error(502, "backend failed")
            return
        done = asyncio.get_running_loop().create_future()
        responder.start(upstream.status, response_headers(upstream.headers))
        upstream.attach(_WriteThrough(responder, done))
        await done

    async def stopped() -> None:
        pool.close()

    server = FrontServer(handle, FrontLimits(64 << 20, 60.0, 30.0), grace_s=1.0, on_stop=stopped)
    uvloop.run(server.serve(host="127.0.0.1", port=port))


class _Queued:
    """A sink that hands each body part to the ASGI app's coroutine through a queue."""

    def __init__(self, queue: asyncio.Queue[bytes | None]) -> None:
        self._queue = queue

    def on_data(self, data: bytes) -> None:
        self._queue.put_nowait(data)

    def on_end(self) -> None:
        self._queue.put_nowait(None)

    def on_error(self, exc: BaseException) -> None:
        self._queue.put_nowait(None)


def serve_uvicorn_forwarder_for_benchmark(port: int, backend_port: int) -> None:
    import uvicorn
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    base = f"http://127.0.0.1:{backend_port}"
    pool = UpstreamPool()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        target = scope["raw_path"] + (b"?" + scope["query_string"] if scope["query_string"] else b"")
        headers = forwarded_headers(list(scope["headers"]))
        try:
            upstream = pool.send_now(scope["method"], base, target, headers, body)
            if upstream is None:
                upstream = await pool.send(scope["method"], base, target, headers, body, None)
            else:
                await upstream.started()
        except UpstreamFailed:
            await send({"type": "http.response.start", "status": 502, "headers": []})
            await send({"type": "http.response.body", "body": b"backend failed"})
            return
        queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        await send({"type": "http.response.start", "status": upstream.status,
                    "headers": response_headers(upstream.headers)})
        upstream.attach(_Queued(queue))
        while (part := await queue.get()) is not None:
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    config = uvicorn.Config(app, host="127.0.0.1", port=port, http=HttpToolsProtocol, loop="uvloop",
                            lifespan="off", access_log=False, log_level="warning", interface="asgi3")
    uvicorn.Server(config).run()


class _BareUpstreamForBenchmark(asyncio.Protocol):
    """The bare forwarder's pooled connection to the backend: every byte back to the client."""

    idle: ClassVar[list[_BareUpstreamForBenchmark]] = []

    def __init__(self) -> None:
        import httptools

        self.client: Any = None
        self.parser = httptools.HttpResponseParser(self)

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.client.transport.write(data)
        self.parser.feed_data(data)

    def on_message_complete(self) -> None:
        self.client = None
        if self.parser.should_keep_alive():
            self.idle.append(self)
        else:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        """llama-server closes a keep-alive connection after its 5th stream: never reuse it, and a
        request caught on it is the client's to send again (its connection is closed)."""
        if self in self.idle:
            self.idle.remove(self)
        if self.client is not None:
            self.client.transport.close()


class _BareClientForBenchmark(asyncio.Protocol):
    """The bare forwarder's client connection: each request's head rebuilt for the backend."""

    backend_port = 0

    def connection_made(self, transport: Any) -> None:
        import httptools

        self.transport = transport
        self.parser = httptools.HttpRequestParser(self)
        self.url, self.headers, self.body = b"", [b""], [b""]

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() not in (b"host", b"connection", b"content-length"):
            self.headers.append(name + b": " + value + b"\r\n")

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        body = b"".join(self.body)
        request = (b"%b %b HTTP/1.1\r\nhost: 127.0.0.1:%d\r\ncontent-length: %d\r\n%b\r\n%b"
                   % (self.parser.get_method(), self.url, self.backend_port, len(body), b"".join(self.headers), body))
        self.url, self.headers, self.body = b"", [b""], [b""]
        if _BareUpstreamForBenchmark.idle:
            upstream = _BareUpstreamForBenchmark.idle.pop()
            upstream.client = self
            upstream.transport.write(request)
        else:
            asyncio.ensure_future(self.connect(request))

    async def connect(self, request: bytes) -> None:
        _, upstream = await asyncio.get_running_loop().create_connection(_BareUpstreamForBenchmark, "127.0.0.1",
                                                                         self.backend_port)
        upstream.client = self
        upstream.transport.write(request)


def serve_bare_forwarder_for_benchmark(port: int, backend_port: int) -> None:
    """A FAKE proxy: each request's head rebuilt for the backend on a pooled connection, every
    response byte copied back as it arrives; no gate, no re-send, no recording, no error handling.
    What a Python proxy on uvloop and httptools cannot go below on this machine."""
    import uvloop

    _BareClientForBenchmark.backend_port = backend_port

    async def serve() -> None:
        server = await asyncio.get_running_loop().create_server(_BareClientForBenchmark, "127.0.0.1", port)
        await server.serve_forever()

    uvloop.run(serve())


FORWARDERS = {"bare": serve_bare_forwarder_for_benchmark, "front": serve_front_forwarder_for_benchmark,
              "uvicorn": serve_uvicorn_forwarder_for_benchmark}

if __name__ == "__main__":
    FORWARDERS[sys.argv[1]](int(sys.argv[2]), int(sys.argv[3]))
