"""Requests a client pipelined and then left behind (specd.proxy.http1.server.FrontConnection): never handled
once the client is gone, and their bodies' bytes given back at once to the daemon-wide budget.

Over a real socket the order of "the client left" and "the answer before them ended" cannot be made certain,
so the connection is driven here as the asyncio protocol it is, on a FAKE transport (TransportFake), with
the real handler of the server's tests (tests/fakes/front_handler.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from specd.proxy.http1.bodies import HeldBytes
from specd.proxy.http1.server import FrontConnection, FrontLimits
from tests.fakes.front_handler import HandlerForFrontTests


class TransportFake:
    """FAKE: the transport a FrontConnection writes to; what it was asked to write is recorded."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        self.written.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


class AdmissionFake:
    """FAKE: the server's count of connections (FrontServer), which admits every one."""

    def admit(self, connection: FrontConnection) -> bool:
        return True

    def discard(self, connection: FrontConnection) -> None:
        pass


async def turns_until(condition: Callable[[], bool], turns: int = 200) -> None:
    """Let the loop run until `condition()` holds (a few turns), or fail."""
    for _ in range(turns):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("the connection never got there")


FIRST = b"GET /answer-then-finish-late HTTP/1.1\r\nHost: x\r\n\r\n"
PIPELINED = b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\n\r\nsecond"


def test_requests_pipelined_behind_one_in_progress_are_dropped_with_their_bytes_when_the_client_leaves() -> None:
    """The first request is answered and its handler is still finishing up (as the proxy's is while it
    records) when the client leaves: the request it pipelined behind must never reach the handler (its answer
    would go nowhere, and the proxy would send it to the backend for nobody), and its body's bytes come back
    to the daemon-wide budget the moment the client is gone, not later."""
    async def scenario() -> tuple[list[str], int, int, bytes]:
        held = HeldBytes()
        handler = HandlerForFrontTests(FrontLimits(max_body_bytes=1 << 20, body_timeout_s=5.0, header_timeout_s=5.0,
                                                   held=held))
        connection = FrontConnection(handler.take, handler.limits, AdmissionFake())
        transport = TransportFake()
        connection.connection_made(transport)  # type: ignore[arg-type]
        connection.data_received(FIRST + PIPELINED)
        await turns_until(lambda: b"done" in b"".join(transport.written))  # answered, the handler still busy
        assert held.held == 6  # the pipelined body waits its turn
        connection.connection_lost(None)
        held_after_leaving = held.held
        handler.finish.set_result(None)  # the first handler ends
        await turns_until(lambda: not connection.busy or len(handler.seen) > 1)
        for _ in range(5):  # room for anything that would still run
            await asyncio.sleep(0)
        return [r.path for r in handler.seen], held_after_leaving, held.held, b"".join(transport.written)

    seen, held_after_leaving, held_at_the_end, written = asyncio.run(scenario())
    assert seen == ["/answer-then-finish-late"]
    assert held_after_leaving == 0 and held_at_the_end == 0
    assert written.count(b"HTTP/1.1 ") == 1 and b"second" not in written
