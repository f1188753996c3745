"""Hostile bodies through the real daemon's proxy to the real llama-server (issue 36, items 1 and 4).

What an owner expects: a body llama-server reads is never refused by the proxy, however deep its
nesting (the pinned build answers a 50,000-deep array in a field it ignores; the proxy cannot read
that deep and records the shape as unknown); a body llama-server refuses gets llama-server's own
answer and then the connection ends, instead of idling until the client gives up; a body of
millions of small JSON objects costs the daemon about its size, not the 20x to 25x that parsing it
into Python objects cost, and the memory goes back once it is answered. The figures under load,
with /v1/models latency, are benchmarks/hostile_bodies.py's.
"""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import httpx

from tests.conftest import Box
from tests.hostile_bodies import length_of, memory_mb, request_head
from tests.system.daemon_rig import chat, real_stack
from tests.system.fault_results import FaultRecorder

SMALL_OBJECTS_BYTES = 8_000_000  # one million small objects: 1M x ~200 B as Python objects
GROWTH_BOUND_MB = 64  # the body is 8 MB; parsed, it grew the daemon by ~200 MB
SETTLE_S = 60.0  # RSS back within SETTLED_MB of where it was, this long after the answer at most
SETTLED_MB = 30


def post_raw(port: int, body: bytes) -> tuple[bytes, bool]:
    """(the answer, whether the proxy closed the connection after it) for `body` on one connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        sock.sendall(request_head(len(body)) + body)
        received = b""
        while b"\r\n\r\n" not in received or len(received.split(b"\r\n\r\n", 1)[1]) < length_of(received):
            chunk = sock.recv(65536)
            if not chunk:
                return received, True
            received += chunk
        sock.settimeout(10)  # generous: a connection kept alive stays open far longer
        try:
            return received, sock.recv(1) == b""
        except TimeoutError:
            return received, False


@real_stack
def test_deep_nests_get_llama_servers_own_answer_and_a_refusal_ends_the_connection(
        box: Box, start_daemon: Any, fault_results: FaultRecorder) -> None:
    daemon = start_daemon()
    box.specd("switch", "autoregressive", check=True)
    base = json.dumps(chat(False, 2))[:-1].encode()
    in_a_field = base + b', "x_nest": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"
    whole_nest = b"[" * 200_000 + b"]" * 200_000
    accepted, accepted_closed = post_raw(daemon.proxy_port, in_a_field)
    refused, refused_closed = post_raw(daemon.proxy_port, whole_nest)
    direct, _ = post_raw(box.port, whole_nest)  # llama-server's own answer, for comparison
    with httpx.Client(timeout=60) as client:
        assert client.post(f"{daemon.proxy_url}/v1/chat/completions", json=chat(False)).status_code == 200

    assert accepted.startswith(b"HTTP/1.1 200") and b'"choices"' in accepted, accepted[:300]
    assert not accepted_closed  # an answered request keeps its connection
    assert refused.startswith(b"HTTP/1.1 400") and direct.startswith(b"HTTP/1.1 400")
    assert refused.split(b"\r\n\r\n", 1)[1] == direct.split(b"\r\n\r\n", 1)[1]  # llama-server's own words
    assert refused_closed and b"connection: close\r\n" in refused.lower()
    fault_results.record(
        "deep JSON nests: 50,000 deep in a field llama-server ignores, 200,000 deep as the whole body",
        bound="llama-server's own answers, never the proxy's refusal; the refused one's connection closed after it",
        measured=(f"50,000 deep: {accepted.split(b' ', 2)[1].decode()} from llama-server, connection kept; "
                  f"200,000 deep: llama-server's 400 relayed word for word, then the connection closed"))


@real_stack
def test_a_body_of_a_million_small_objects_costs_the_daemon_about_its_size(
        box: Box, start_daemon: Any, fault_results: FaultRecorder) -> None:
    head = json.dumps(chat(False, 2))[:-1].encode() + b', "x_items": ['
    body = head + b'{"k":1},' * ((SMALL_OBJECTS_BYTES - len(head)) // 8) + b'{"k":1}]}'
    daemon = start_daemon()
    box.specd("switch", "autoregressive", check=True)
    pid = daemon.main_pid(daemon.unit)
    before = memory_mb(pid)
    with httpx.Client(timeout=300) as client:
        reply = client.post(f"{daemon.proxy_url}/v1/chat/completions", content=body,
                            headers={"content-type": "application/json"})
    peak = memory_mb(pid)
    answered = time.monotonic()
    while memory_mb(pid)["VmRSS"] > before["VmRSS"] + SETTLED_MB and time.monotonic() - answered < SETTLE_S:
        time.sleep(0.5)
    settled_s, after = time.monotonic() - answered, memory_mb(pid)

    assert reply.status_code == 200 and reply.json()["choices"], reply.text[:300]  # llama-server's own answer
    growth_mb = peak["VmHWM"] - before["VmHWM"]
    assert growth_mb < GROWTH_BOUND_MB, (before, peak)
    assert after["VmRSS"] < before["VmRSS"] + SETTLED_MB, (before, after)
    fault_results.record(
        f"a {SMALL_OBJECTS_BYTES / 1e6:.0f} MB body of a million small JSON objects",
        bound=(f"llama-server's answer; daemon peak RSS growth < {GROWTH_BOUND_MB} MB; RSS back within "
               f"{SETTLED_MB} MB of before within {SETTLE_S:g} s"),
        measured=(f"200; peak RSS +{growth_mb:.0f} MB; RSS {before['VmRSS']:.0f} -> {after['VmRSS']:.0f} MB "
                  f"{settled_s:.1f} s after the answer"))
