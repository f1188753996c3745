"""How busy a server is, asked of the server (specd.deploy.load): what a blue-green switch waits on before it
stops the old server, and what a shadow bench stamps on each sample. The pages come from FAKE servers (httpx's
own MockTransport) in the formats llama-server and vLLM publish: a real server cannot be made to hold a deferred
queue, publish vLLM's gauges or go away mid-drain on cue in milliseconds. The real llama-server's answers are
read in tests/system/test_bluegreen.py and test_shadow.py."""

from __future__ import annotations

import json

import httpx
import pytest

from specd.deploy.load import Drained, requests_in_progress, wait_until_idle

LLAMA_METRICS = """\
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing {processing}
# HELP llamacpp:requests_deferred Number of requests deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred {deferred}
"""
VLLM_METRICS = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine="0",model_name="m"}} {running}
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{engine="0",model_name="m"}} {waiting}
"""
Page = tuple[int, str]


def fake_server(slots: Page | None, metrics: Page | None, seen: list[httpx.Request] | None = None) -> httpx.Client:
    """A client whose server answers /slots and /metrics as given (None: the connection is refused)."""
    def handle(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        page = {"/slots": slots, "/metrics": metrics}.get(request.url.path)
        if page is None:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(page[0], text=page[1])
    return httpx.Client(transport=httpx.MockTransport(handle))


def slots(*processing: bool) -> Page:
    return 200, json.dumps([{"id": n, "is_processing": busy} for n, busy in enumerate(processing)])


def test_processing_slots_and_deferred_requests_add_up() -> None:
    client = fake_server(slots(True, False, True), (200, LLAMA_METRICS.format(processing=2, deferred=3)))
    assert requests_in_progress(client, "http://s") == 5


def test_the_slots_alone_count_when_metrics_are_off() -> None:
    assert requests_in_progress(fake_server(slots(True, True), (501, "metrics disabled")), "http://s") == 2
    assert requests_in_progress(fake_server(slots(False), None), "http://s") == 0


def test_without_slots_the_llama_server_gauges_count_processing_and_deferred() -> None:
    for no_slots in [(501, '{"error": "slots disabled"}'), (200, '{"not": "a list"}'), (200, "not json"), None]:
        client = fake_server(no_slots, (200, LLAMA_METRICS.format(processing=1, deferred=2)))
        assert requests_in_progress(client, "http://s") == 3, no_slots


def test_vllm_is_counted_by_its_running_and_waiting_gauges() -> None:
    client = fake_server((404, "Not Found"), (200, VLLM_METRICS.format(running=2, waiting=4)))
    assert requests_in_progress(client, "http://s") == 6


def test_a_server_that_cannot_say_is_none_not_idle() -> None:
    assert requests_in_progress(fake_server(None, None), "http://s") is None
    assert requests_in_progress(fake_server((404, ""), (200, "# no gauges here\nother_metric 1\n")), "http://s") is None
    assert requests_in_progress(fake_server((404, ""), (200, "garbage {{{")), "http://s") is None


def test_the_api_key_goes_with_both_questions_and_no_header_without_one() -> None:
    seen: list[httpx.Request] = []
    requests_in_progress(fake_server(slots(False), (200, LLAMA_METRICS.format(processing=0, deferred=0)), seen),
                         "http://s", "k-123")
    assert [(r.url.path, r.headers.get("authorization")) for r in seen] == [
        ("/slots", "Bearer k-123"), ("/metrics", "Bearer k-123")]
    seen.clear()
    requests_in_progress(fake_server(slots(False), None, seen), "http://s")
    assert all("authorization" not in r.headers for r in seen)


class FakeServerTimeline:
    """The server's count at each poll, on a clock that moves only when the waiter sleeps (binary fractions of
    a second, so that the times add up exactly)."""

    def __init__(self, counts: list[int | None]) -> None:
        self.counts = counts
        self.now = 100.0
        self.polls = 0

    def client(self) -> httpx.Client:
        def handle(request: httpx.Request) -> httpx.Response:
            count = self.counts[min(self.polls, len(self.counts) - 1)]
            if request.url.path == "/metrics":
                self.polls += 1
            if count is None:
                raise httpx.ConnectError("gone", request=request)
            if request.url.path == "/slots":
                return httpx.Response(200, json=[{"is_processing": n < count} for n in range(max(count, 1))])
            return httpx.Response(200, text=LLAMA_METRICS.format(processing=count, deferred=0))
        return httpx.Client(transport=httpx.MockTransport(handle))

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def wait(self, timeout_s: float = 10.0) -> Drained:
        return wait_until_idle(self.client(), "http://s", timeout_s=timeout_s, quiet_s=0.25, poll_s=0.125,
                               clock=self.clock, sleep=self.sleep)


def test_an_idle_server_is_idle_once_it_stays_quiet_for_the_quiet_time() -> None:
    timeline = FakeServerTimeline([0])
    drained = timeline.wait()
    assert drained.idle is True and drained.busy_at_start == 0
    assert drained.waited_s == 0.25


def test_the_wait_lasts_until_the_last_request_ends_and_a_late_one_restarts_the_quiet_time() -> None:
    timeline = FakeServerTimeline([2, 2, 1, 0, 1, 0, 0, 0, 0])  # a request arrives during the first quiet moment
    drained = timeline.wait()
    assert drained.idle is True and drained.busy_at_start == 2
    assert drained.waited_s == 0.875  # quiet from the poll at 0.625 s, for 0.25 s
    assert timeline.polls >= 8


def test_a_server_still_busy_at_the_timeout_is_reported_busy() -> None:
    timeline = FakeServerTimeline([1])
    drained = timeline.wait(timeout_s=1.0)
    assert drained.idle is False and drained.busy_at_start == 1
    assert drained.waited_s == 1.0


@pytest.mark.parametrize(("counts", "idle", "waited"), [([None], None, 0.0), ([1, 1, None], True, 0.25)])
def test_a_server_that_cannot_say_is_not_waited_for(counts: list[int | None], idle: bool | None,
                                                     waited: float) -> None:
    drained = FakeServerTimeline(counts).wait()
    assert drained.idle is idle and drained.waited_s == waited


def test_waiting_uses_the_given_clock_only(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_real_sleep(seconds: float) -> None:
        raise AssertionError("slept for real")
    monkeypatch.setattr("time.sleep", no_real_sleep)
    assert FakeServerTimeline([1, 0, 0, 0]).wait().idle is True



def test_a_server_busy_at_the_start_is_quiet_only_from_the_poll_that_finds_it_idle() -> None:
    timeline = FakeServerTimeline([1, 0])  # its last request ends before the first poll after the start
    drained = timeline.wait()
    assert drained.idle is True and drained.busy_at_start == 1
    assert drained.waited_s == 0.375  # quiet from the poll at 0.125 s, for 0.25 s


def test_every_poll_of_a_wait_carries_the_api_key() -> None:
    seen: list[httpx.Request] = []
    client = fake_server(slots(False), (200, LLAMA_METRICS.format(processing=0, deferred=0)), seen)
    drained = wait_until_idle(client, "http://s", api_key="sk-old", timeout_s=1.0, quiet_s=0.25, poll_s=0.125,
                              clock=iter([0.0, 0.0, 0.125, 0.125, 0.25, 0.25, 0.375]).__next__, sleep=lambda _: None)
    assert drained.idle is True and len(seen) >= 2
    assert {r.headers.get("authorization") for r in seen} == {"Bearer sk-old"}
