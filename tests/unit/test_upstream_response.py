"""The backend's answer as the proxy's upstream client holds it (specd.proxy.http1.response.UpstreamResponse):
what the proxy gets when the answer breaks off, whatever the order in which the connection's events and the
proxy's read arrive. The connection is a FAKE (FakeBackendConnection): a real socket cannot be made to deliver
its close before or after the proxy's read on cue; the real connection is tested through the whole proxy in
test_http1_upstream_conformance.py."""

from __future__ import annotations

import asyncio

import pytest

from specd.proxy.http1.response import UpstreamFailed, UpstreamResponse


class FakeBackendConnection:
    """FAKE: the part of a backend connection an UpstreamResponse calls."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.detached = False

    def detach(self) -> None:
        self.detached = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def response_on(**options: bool) -> UpstreamResponse:
    connection = FakeBackendConnection(asyncio.get_running_loop())
    return UpstreamResponse(connection, None, False, **options)  # type: ignore[arg-type]


def run(scenario: object) -> object:
    return asyncio.run(asyncio.wait_for(scenario, 5))  # type: ignore[arg-type]


def test_a_body_that_broke_off_before_the_proxy_read_it_raises_the_break_not_a_short_body() -> None:
    async def scenario() -> object:
        response = response_on()
        response.headers_done(200)
        response.data(b'{"choi')
        response.broke(ConnectionResetError("the backend went away"))
        with pytest.raises(ConnectionResetError):
            await response.read()
        return "raised"

    assert run(scenario()) == "raised"


def test_a_break_before_the_status_line_fails_the_attempt_naming_its_cause() -> None:
    async def scenario() -> UpstreamFailed:
        response = response_on(reused=True)
        response.broke(ConnectionResetError("reset"))
        with pytest.raises(UpstreamFailed) as failed:
            await response.started()
        return failed.value

    failed = run(scenario())
    assert isinstance(failed, UpstreamFailed)
    assert (failed.outcome, failed.cause_name, failed.reused) == ("dropped", "ConnectionResetError", True)


def test_a_body_that_came_in_several_reads_is_joined_byte_for_byte() -> None:
    async def scenario() -> bytes:
        response = response_on()
        response.headers_done(200)
        reading = asyncio.ensure_future(response.read())
        for part in (b'{"a": ', b'"b", ', b'"c": 1}'):
            response.data(part)
            await asyncio.sleep(0)
        response.complete()
        return await reading

    assert run(scenario()) == b'{"a": "b", "c": 1}'


def test_a_response_the_proxy_abandons_fails_its_waiters_with_a_connection_abort() -> None:
    async def scenario() -> tuple[str, str]:
        waiting_head = response_on()
        waiting_head.close()  # the client left before the status line
        with pytest.raises(UpstreamFailed) as failed:
            await waiting_head.started()
        reading_body = response_on()
        reading_body.headers_done(200)
        reading = asyncio.ensure_future(reading_body.read())
        await asyncio.sleep(0)
        reading_body.close()
        with pytest.raises(ConnectionAbortedError) as aborted:
            await reading
        return failed.value.cause_name, str(aborted.value)

    assert run(scenario()) == ("ConnectionAbortedError", "closed by the proxy")
