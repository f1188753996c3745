"""The daemon's HTTP servers (specd.daemon.service.make_server): a response's headers leave with its
first body bytes, and never wait for body bytes that are not ready."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from specd.daemon.service import HeadersWithBody
from tests.proxy_fakes import ServerThread, free_port

LATE_BODY_S = 1.0


async def answer_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Starts the response, then sends its body LATE_BODY_S later."""
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await asyncio.sleep(LATE_BODY_S)
    await send({"type": "http.response.body", "body": b"the body", "more_body": True})
    await send({"type": "http.response.body", "body": b""})


@pytest.fixture
def server() -> Iterator[ServerThread]:
    running = ServerThread(answer_app, free_port()).start()
    yield running
    running.stop()


def first_read(port: int, path: str) -> tuple[bytes, float]:
    """What one recv() returns after sending the request, and how long it took."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sent = time.perf_counter()
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        data = sock.recv(65536)
        return data, time.perf_counter() - sent


class RecordingTransportForTests:
    """A FAKE transport: records each write (each would be one send() on the socket)."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True


def test_a_status_line_leaves_with_the_next_write_or_alone_at_the_end_of_the_turn() -> None:
    async def scenario() -> list[list[bytes]]:
        seen: list[list[bytes]] = []
        transport = RecordingTransportForTests()
        wrapped = HeadersWithBody(transport, asyncio.get_running_loop())  # type: ignore[arg-type]
        wrapped.write(b"HTTP/1.1 200 OK\r\n\r\n")
        wrapped.write(b"5\r\nhello\r\n")  # the same turn: one send for both
        wrapped.write(b"0\r\n\r\n")
        seen.append(list(transport.writes))
        wrapped.write(b"HTTP/1.1 200 OK\r\n\r\n")
        seen.append(list(transport.writes))  # held...
        await asyncio.sleep(0)
        seen.append(list(transport.writes))  # ...for one turn of the loop at most
        wrapped.write(b"HTTP/1.1 503 Service Unavailable\r\n\r\n")
        wrapped.close()  # a close sends what is held first
        seen.append(list(transport.writes))
        return seen

    together, held, alone, closed = asyncio.run(scenario())
    assert together == [b"HTTP/1.1 200 OK\r\n\r\n5\r\nhello\r\n", b"0\r\n\r\n"]
    assert held == together
    assert alone == [*together, b"HTTP/1.1 200 OK\r\n\r\n"]
    assert closed == [*alone, b"HTTP/1.1 503 Service Unavailable\r\n\r\n"]


def test_headers_do_not_wait_for_a_body_that_is_not_ready(server: ServerThread) -> None:
    data, took_s = first_read(server.port, "/late")
    assert data.startswith(b"HTTP/1.1 200 ") and data.endswith(b"\r\n\r\n")  # the headers alone
    assert took_s < LATE_BODY_S / 2
