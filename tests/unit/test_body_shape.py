"""Reading a request body's shape with bounded work, and holding bodies within bounds (issue 36).

Pure parts, in milliseconds: what the traffic row keeps of a body (specd.traffic.shape.read_shape),
the memory that reading costs (tracemalloc), the daemon-wide count of held body bytes
(specd.proxy.http1.bodies), the captured workload line, the trim after a burst. The proxy over
loopback is tests/unit/test_proxy_bodies.py.
"""

from __future__ import annotations

import asyncio
import json
import tracemalloc
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specd.proxy.heap import Trimmer, give_back_free_memory
from specd.proxy.http1.bodies import BodyBuffer, HeldBytes
from specd.traffic.capture import workload_line
from specd.traffic.shape import MAX_READ_BYTES, MAX_READ_ITEMS, RequestShape, read_shape, request_shape

SMALL_OBJECT = b'{"k":1},'


def chat(text: str, **extra: Any) -> bytes:
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": text}], **extra}).encode()


def padded(size: int) -> bytes:
    """A chat body of about `size` bytes whose padding is small objects: cheap to send, costly to parse."""
    head, tail = chat("Write a python function")[:-1] + b', "x_items": [', b'{"k":1}]}'
    return head + SMALL_OBJECT * ((size - len(head) - len(tail)) // len(SMALL_OBJECT)) + tail


def read_with_peak(body: bytes) -> tuple[RequestShape, int]:
    """The shape read, and the most memory Python allocated while reading it."""
    tracemalloc.start()
    try:
        shape = read_shape(body)
        return shape, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_chat_body_gives_its_stream_flag_task_class_sampling_and_conversation() -> None:
    shape = read_shape(chat("Write a python function that adds numbers", stream=True, temperature=0.5))
    assert shape.read and shape.stream and shape.task_class == "code"
    assert shape.sampling == '{"temperature":0.5}' and shape.turn == 1 and shape.conversation is not None
    assert read_shape(b"").read and not read_shape(b"").stream  # no body: nothing unknown about it


def test_a_body_past_the_bounds_is_not_parsed_and_costs_next_to_no_memory() -> None:
    too_big = padded(MAX_READ_BYTES + 1024)
    too_many = padded(1_000_000)  # 1 MB of small objects: ~125,000 of them, 25 MB as Python objects
    assert too_many.count(b",") > MAX_READ_ITEMS
    for body, why in ((too_big, f"body over {MAX_READ_BYTES} bytes"), (too_many, f"over {MAX_READ_ITEMS} JSON items")):
        shape, peak = read_with_peak(body)
        assert shape.unknown == why and not shape.stream and shape.task_class is None
        assert peak < 64 * 1024, peak  # parsed, these bodies took 20x to 25x their size


def test_a_body_just_within_the_item_bound_is_read_within_the_memory_the_bound_allows() -> None:
    body = padded(len(SMALL_OBJECT) * (MAX_READ_ITEMS // 2 - 1000))  # the most small objects still read (2 marks each)
    shape, peak = read_with_peak(body)
    assert shape.read and shape.task_class == "code"
    assert peak < 30_000_000, peak  # "at most about 25 MB" (specd.traffic.shape.MAX_READ_ITEMS)


def test_nesting_too_deep_to_read_is_an_unknown_shape_never_an_error() -> None:
    assert read_shape(b"[" * 200_000 + b"]" * 200_000).unknown == f"over {MAX_READ_ITEMS} JSON items"
    assert read_shape(b'{"x":' + b"[" * 5000 + b"]" * 5000 + b"}").unknown == "nested too deep to read"
    opening = b'{"messages":[{"role":"user","content":' + b"[" * 990 + b"]" * 990 + b"}]}"
    assert read_shape(opening).unknown in (None, "nested too deep to read")  # the hash re-encodes it: either way


def test_what_is_not_a_json_object_is_named() -> None:
    assert read_shape(b"not json").unknown == "not JSON"
    assert read_shape(b"\xff\xfe{").unknown == "not JSON"
    assert read_shape(b"[1, 2]").unknown == "not a JSON object"


JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
JSON_KEYS = st.sampled_from(["messages", "stream", "content", "role", "temperature", "text", "x"])
JSON_VALUES: st.SearchStrategy[Any] = st.deferred(
    lambda: JSON_SCALARS | st.lists(JSON_VALUES, max_size=4) | st.dictionaries(JSON_KEYS, JSON_VALUES, max_size=4))


@settings(max_examples=200, deadline=None)
@given(document=st.dictionaries(JSON_KEYS, JSON_VALUES, max_size=5))
def test_within_the_bounds_the_bytes_read_give_the_shape_of_the_document(document: dict[str, Any]) -> None:
    assert read_shape(json.dumps(document).encode()) == request_shape(document)


@settings(max_examples=300, deadline=None)
@given(body=st.binary(max_size=300) | st.text(alphabet='{}[],:"01ab\\ \n', max_size=300).map(str.encode))
def test_any_bytes_give_a_shape_never_an_exception(body: bytes) -> None:
    shape = read_shape(body)
    assert shape.read == (shape.unknown is None)


# ---- bodies held for clients --------------------------------------------------------------------


def test_a_body_is_held_whole_and_counted_until_released() -> None:
    held = HeldBytes(limit=1000)
    buffer = BodyBuffer(held, max_bytes=800)
    assert buffer.add(b"a" * 300) is None and buffer.add(b"b" * 300) is None
    body, size = buffer.take()
    assert body == b"a" * 300 + b"b" * 300 and size == 600 and held.held == 600
    held.release(size)
    assert held.held == 0 and held.peak == 600


def test_a_body_over_its_own_limit_is_413_and_its_bytes_go_back() -> None:
    held = HeldBytes(limit=10_000)
    buffer = BodyBuffer(held, max_bytes=500)
    assert buffer.expect(501) == (413, "request body over 500 bytes", "invalid_request_error")
    assert buffer.add(b"x" * 400) is None
    assert buffer.add(b"x" * 200) == (413, "request body over 500 bytes", "invalid_request_error")
    assert held.held == 0 and buffer.size == 0


def test_past_the_daemon_wide_limit_a_body_is_503_whoever_holds_the_rest() -> None:
    held = HeldBytes(limit=1000)
    first, second = BodyBuffer(held, max_bytes=900), BodyBuffer(held, max_bytes=900)
    assert first.add(b"x" * 700) is None
    refused = second.expect(400)
    assert refused is not None and refused[0] == 503 and "1000 bytes" in refused[1]
    assert second.expect(300) is None and second.add(b"y" * 300) is None  # exactly at the limit: taken
    assert second.add(b"y") == refused  # one byte more: refused, and its 300 counted back
    assert held.held == 700
    first.drop()
    assert held.held == 0 and second.expect(900) is None


def test_released_bytes_of_a_burst_trigger_one_trim() -> None:
    async def burst() -> Trimmer:
        trimmer = Trimmer(after_bytes=1000, delay_s=0.01)
        held = HeldBytes(limit=10_000, on_release=trimmer.released)
        for _ in range(5):
            held.take(400)
            held.release(400)
        while trimmer.trims == 0:
            await asyncio.sleep(0.01)
        return trimmer

    assert asyncio.run(asyncio.wait_for(burst(), 30)).trims == 1
    give_back_free_memory()  # harmless to call at any time


def test_each_burst_reaching_the_threshold_trims_once_on_a_thread(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from specd.proxy import heap

    trimmed_on: list[str] = []
    monkeypatch.setattr(heap, "give_back_free_memory", lambda: trimmed_on.append(threading.current_thread().name))

    async def bursts() -> Trimmer:
        trimmer = Trimmer(after_bytes=1000, delay_s=0.01)
        assert trimmer.trims == 0
        for burst in range(2):
            trimmer.released(600)
            trimmer.released(400)  # exactly the threshold: a trim
            while trimmer.trims == burst or len(trimmed_on) == burst:
                await asyncio.sleep(0.01)
        return trimmer

    assert asyncio.run(asyncio.wait_for(bursts(), 30)).trims == 2
    assert len(trimmed_on) == 2 and threading.main_thread().name not in trimmed_on  # off the event loop


# ---- captured bodies ----------------------------------------------------------------------------


def test_a_captured_line_is_the_clients_object_on_one_line_with_specds_member_last() -> None:
    body = b'{\n  "messages": [{"role": "user", "content": "two\\nlines \xe2\x80\xa8 sep"}],\r\n  "specd": 1\n}\n'
    line = workload_line(body, {"recorded_at": 1.5, "concurrency": 2})
    assert line is not None and line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line) == {**json.loads(body), "specd": {"recorded_at": 1.5, "concurrency": 2}}
    assert json.loads(workload_line(b"{}", {"a": 1}) or b"") == {"specd": {"a": 1}}
    assert workload_line(b"[1]", {}) is None and workload_line(b"\xff{}", {}) is None


def test_a_fresh_trimmer_waits_for_the_whole_threshold() -> None:
    async def short_then_whole() -> tuple[int, int]:
        trimmer = Trimmer(after_bytes=1000, delay_s=0.01)
        trimmer.released(999)  # one byte short of the threshold: no trim
        await asyncio.sleep(0.1)
        before = trimmer.trims
        trimmer.released(1)
        while trimmer.trims == before:
            await asyncio.sleep(0.01)
        return before, trimmer.trims

    assert asyncio.run(asyncio.wait_for(short_then_whole(), 30)) == (0, 1)


def test_the_loop_reads_bodies_up_to_its_bound_the_thread_up_to_the_reading_bound_and_nothing_past_it() -> None:
    from specd.proxy.bodies import BodyReader

    reader = BodyReader(inline_bytes=64)
    small = json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode()
    at_bound = small[:-1] + b" " * (64 - len(small)) + b"}"
    assert len(at_bound) == 64 and reader.inline(at_bound) and not reader.inline(at_bound + b" ")
    shape = reader.read_now(at_bound)
    assert shape is not None and shape.unknown is None  # read on the loop, at exactly its bound
    assert reader.read_now(at_bound + b" ") is None  # one byte more: the thread reads it
    at_limit = b" " * MAX_READ_BYTES
    assert reader.read_now(at_limit) is None  # still read, off the loop
    past = reader.read_now(at_limit + b" ")
    assert past is not None and past.unknown == f"body over {MAX_READ_BYTES} bytes"
    reader.close()
