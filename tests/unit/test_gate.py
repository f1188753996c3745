"""The proxy's gate (specd.proxy.gate): a pause is a lease that ends by itself, renewed only while it
holds; held requests wait for it. Pure asyncio, no sockets: the switch's drain relies on each of these."""

from __future__ import annotations

import asyncio
import time

import pytest

from specd.proxy.gate import BackendGate, HoldExpired


async def healthy() -> bool:
    return True


async def never_healthy() -> bool:
    return False


def test_a_pause_is_a_lease_that_ends_by_itself() -> None:
    async def scenario() -> None:
        gate = BackendGate(healthy, poll_s=0.01)
        gate.pause(0.2)
        assert gate.paused and not gate.open
        await gate.wait(time.perf_counter() + 30, 30)  # returns once the lease ran out and /health answered
        assert not gate.paused and gate.open
        gate.stop()

    asyncio.run(scenario())


def test_renew_extends_a_pause_that_holds_and_refuses_one_that_ended() -> None:
    async def scenario() -> None:
        gate = BackendGate(healthy, poll_s=0.01)
        assert gate.renew(30) is False  # nothing to renew
        gate.pause(30)
        assert gate.renew(30) is True and gate.paused
        gate.resume()
        assert gate.renew(30) is False and not gate.paused
        await gate.wait(time.perf_counter() + 30, 30)
        assert gate.open
        gate.stop()

    asyncio.run(scenario())


def test_resume_ends_the_lease_early_and_its_timer_with_it() -> None:
    async def scenario() -> None:
        gate = BackendGate(healthy, poll_s=0.01)
        gate.pause(0.3)
        past_the_first_lease = asyncio.Event()
        asyncio.get_running_loop().call_later(0.3, past_the_first_lease.set)  # runs after the lease's own timer
        gate.resume()
        gate.pause(30)  # a new pause: the old lease's timer must not end it
        await past_the_first_lease.wait()
        assert gate.paused
        gate.resume()
        gate.stop()

    asyncio.run(scenario())


def test_a_held_request_gives_up_at_its_deadline_while_the_backend_stays_down() -> None:
    async def scenario() -> None:
        gate = BackendGate(never_healthy, poll_s=0.01)
        gate.mark_unhealthy()
        with pytest.raises(HoldExpired, match="not healthy after 7 s"):
            await gate.wait(time.perf_counter() + 0.2, 7)
        gate.close()  # a shutdown lets everything held go
        assert gate.open
        gate.stop()

    asyncio.run(scenario())


def test_resume_without_a_new_pause_leaves_no_lease_to_close_the_gate_again() -> None:
    async def scenario() -> None:
        probes: list[float] = []

        async def counted() -> bool:
            probes.append(time.monotonic())
            return True

        gate = BackendGate(counted, poll_s=0.01)
        gate.pause(0.2)
        past_the_lease = asyncio.Event()
        asyncio.get_running_loop().call_later(0.4, past_the_lease.set)  # after the lease's own timer
        gate.resume()  # the switch ended early: the lease's timer goes with it
        await gate.wait(time.perf_counter() + 30, 30)
        checked = len(probes)
        await past_the_lease.wait()
        assert gate.open and gate.healthy and len(probes) == checked  # no second resume: no new hold, no probe
        gate.stop()

    asyncio.run(scenario())


def test_a_closed_gate_stops_polling_a_backend_that_stays_down() -> None:
    async def scenario() -> None:
        gate = BackendGate(never_healthy, poll_s=0.01)
        gate.mark_unhealthy()
        gate.close()  # the proxy shuts down: nothing may go on probing /health behind it
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        await asyncio.wait_for(asyncio.gather(*others), 30)
        assert gate.open

    asyncio.run(scenario())


def test_a_held_request_with_time_left_goes_when_the_pause_ends() -> None:
    async def scenario() -> None:
        gate = BackendGate(healthy, poll_s=0.01)
        gate.pause(30)
        asyncio.get_running_loop().call_soon(gate.resume)
        await gate.wait(time.perf_counter() + 0.9, 0.9)  # under a second left: still held, not given up
        assert gate.open
        gate.stop()

    asyncio.run(scenario())


def test_the_hold_histogram_records_no_wait_through_an_open_gate_and_the_wait_through_a_paused_one() -> None:
    from specd.proxy.metrics import ProxyMetrics

    def hold(metrics: ProxyMetrics, stat: str) -> float:
        value = metrics.registry.get_sample_value(f"specd_proxy_hold_seconds_{stat}")
        return 0.0 if value is None else value

    async def scenario() -> None:
        metrics = ProxyMetrics()
        gate = BackendGate(healthy, poll_s=0.01)
        await gate.wait(time.perf_counter() + 30, 30)  # open
        await gate.pass_through(time.perf_counter() + 30, 30, metrics)
        assert (hold(metrics, "count"), hold(metrics, "sum")) == (1.0, 0.0)
        gate.pause(0.3)
        await gate.pass_through(time.perf_counter() + 30, 30, metrics)  # held until the lease ends
        assert hold(metrics, "count") == 2.0 and 0.25 <= hold(metrics, "sum") < 5.0
        gate.stop()

    asyncio.run(scenario())
