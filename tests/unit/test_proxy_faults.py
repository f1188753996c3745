"""Faults and hostile input at the proxy: hung backends, bad bodies, slow and vanishing clients, secrets.

What `tests/test_proxy.py` covers is not repeated here (a dropped stream, a client that hangs up
mid-stream, a hold timeout, a small body limit, capture modes, shutdown). Backends are the FAKE
`FakeBackendForProxyTests` where the fault must be produced on demand, and the real llama-server
(stopped with SIGSTOP) where a real process can produce it.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import stat
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specd.cli import main
from specd.daemon.service import bind_tcp
from specd.profiles.config import load_config
from specd.traffic.capture import BodyCapture
from tests.conftest import REPO
from tests.fakes.proxy_fakes import (
    chat_body,
    eventually,
    free_port,
    read_stream,
)
from tests.fakes.proxy_rig import ProxyRig

SECRET = "sk-test-0123456789abcdef"


Rig = ProxyRig


def make_faults_rig(tmp_path: Path, **options: Any) -> ProxyRig:
    return ProxyRig(tmp_path, **{"tokens": 6, **options})


@pytest.fixture
def make_rig(tmp_path: Path) -> Iterator[Callable[..., ProxyRig]]:
    rigs: list[ProxyRig] = []

    def make(**options: Any) -> ProxyRig:
        rigs.append(make_faults_rig(tmp_path / f"rig{len(rigs)}", **options))
        return rigs[-1]

    yield make
    for rig in rigs:
        rig.close()


def chat_url(rig: Rig) -> str:
    return f"{rig.url}/v1/chat/completions"


def works(rig: Rig) -> bool:
    with httpx.Client(timeout=30) as client:
        return read_stream(client, chat_url(rig), chat_body(stream=True))[-1] == "[DONE]"


# ---- service faults: a backend that hangs ------------------------------------------------------------


def test_a_stream_longer_than_the_idle_timeout_that_keeps_sending_is_not_cut(tmp_path: Path) -> None:
    """The idle timeout bounds the silence between parts, not the stream: 3 s of tokens 0.1 s apart
    under a 1 s idle timeout arrive whole."""
    rig = make_faults_rig(tmp_path, stream_idle_timeout_s=1.0, tokens=30, token_delay_s=0.1)
    try:
        with httpx.Client(timeout=60) as client:
            payloads = read_stream(client, chat_url(rig), chat_body(stream=True))
        assert payloads[-1] == "[DONE]" and len(payloads) == 30 + 3
    finally:
        rig.close()


def test_a_non_streamed_answer_slower_than_the_stream_idle_timeout_is_waited_for(make_rig: Callable[..., Rig]) -> None:
    """llama-server sends nothing of a non-streamed answer until it is whole: the idle bound is for streams."""
    rig = make_rig(stream_idle_timeout_s=1.0, token_delay_s=0.25)  # the answer takes 6 x 0.25 = 1.5 s
    response = httpx.post(chat_url(rig), json=chat_body(), timeout=30)
    assert response.status_code == 200 and response.json()["choices"][0]["message"]["content"] == "x" * 6


def test_a_stream_that_hangs_after_tokens_came_within_the_idle_timeout_is_still_ended(
        make_rig: Callable[..., Rig]) -> None:
    """The idle clock restarts at each read: the first check finds the stream recently active and looks again
    later, and that later look ends it."""
    rig = make_rig(stream_idle_timeout_s=1.0, token_delay_s=0.4)
    with httpx.Client(timeout=10) as client:  # the stall is seen about 1 s after the last token
        payloads = read_stream(client, chat_url(rig), chat_body(stream=True, x_fake_hang_after=2))
    contents = [json.loads(p)["choices"][0]["delta"].get("content") for p in payloads[:-1]]
    assert contents == [None, "t0", "t1"]
    error = json.loads(payloads[-1])["error"]
    assert error["code"] == 504 and "stalled" in error["message"]


def test_a_stream_that_hangs_midway_is_ended_and_other_streams_and_later_requests_go_on(
        make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(stream_idle_timeout_s=1.0)
    hung: list[list[str]] = []
    others: list[str] = []

    def hanging() -> None:
        with httpx.Client(timeout=60) as client:
            hung.append(read_stream(client, chat_url(rig), chat_body(stream=True, x_fake_hang_after=3)))

    def normal() -> None:
        with httpx.Client(timeout=60) as client:
            for _ in range(3):
                others.append(read_stream(client, chat_url(rig), chat_body(stream=True))[-1])

    threads = [threading.Thread(target=hanging)] + [threading.Thread(target=normal) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    [payloads] = hung  # read_stream raises on a half-written event
    contents = [json.loads(p)["choices"][0]["delta"].get("content") for p in payloads[:-1]]
    assert contents == [None, "t0", "t1", "t2"]  # what came before the hang arrived whole, then a clean end
    error = json.loads(payloads[-1])["error"]
    assert error["code"] == 504 and "stalled" in error["message"]
    assert others == ["[DONE]"] * 12
    eventually(rig.settled, "the proxy to settle")
    eventually(lambda: rig.fake.closed_early == 1, "the proxy to hang up on the stuck backend stream")
    assert sorted(r.status for r in rig.records()) == [200] * 12 + [504]
    assert works(rig)


def test_a_backend_that_accepts_and_never_answers_gets_a_504_not_a_hang(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(stream_idle_timeout_s=1.0)
    with httpx.Client(timeout=30) as client:
        response = client.post(chat_url(rig), json=chat_body(stream=True, x_fake_hang_before_answer=True))
    assert response.status_code == 504 and response.json()["error"]["type"] == "api_error"
    eventually(lambda: rig.fake.abandoned == 1, "the proxy to hang up on the silent backend")
    eventually(rig.settled, "the proxy to settle")
    assert len(rig.fake.requests) == 1  # not re-sent: the backend had the request
    assert works(rig)


# ---- bad input: bodies ---------------------------------------------------------------------------


HOSTILE_BODIES: dict[str, bytes] = {
    "nested 100k deep": b"[" * 100_000,
    "nested object": b'{"messages": ' + b"[" * 50_000 + b"]" * 50_000 + b"}",
    "not UTF-8": b'{"messages": "\xff\xfe\xfa"}',
    "NUL bytes": b'{"messages": [{"role": "user", "content": "a\\u0000b"}], "x": "\x00"}',
    "array": b'[{"role": "user", "content": "hi"}]',
    "bare string": b'"just a string"',
    "messages wrong type": b'{"messages": 5, "stream": "yes"}',
    "messages of junk": b'{"messages": [1, null, "x", {"content": {"a": [1]}}, {"content": [5, null]}]}',
    "stream not bool": b'{"messages": [], "stream": 1}',
    "huge number": b'{"messages": [], "max_tokens": 1' + b"0" * 5000 + b"}",
    "1 MB of text": json.dumps(chat_body("x" * 1_000_000)).encode(),
    "empty": b"",
}


@pytest.mark.parametrize("name", sorted(HOSTILE_BODIES))
def test_hostile_bodies_get_an_answer_and_leave_the_proxy_working(make_rig: Callable[..., Rig], tmp_path: Path,
                                                                  name: str) -> None:
    rig = make_rig(capture=BodyCapture(tmp_path / "capture", 1 << 20), max_body_bytes=4 << 20)
    with httpx.Client(timeout=30) as client:
        response = client.post(chat_url(rig), content=HOSTILE_BODIES[name],
                               headers={"content-type": "application/json"})
    assert response.status_code in (200, 400)  # the backend's own answer, never the proxy's 500
    assert len(rig.fake.requests) == 1  # forwarded as it came
    eventually(rig.settled, "the proxy to settle")
    assert works(rig)


# Any JSON document, nested a few levels (st.deferred: st.recursive's "does extend use its argument"
# check fires at random on this correct strategy under recent hypothesis, and warnings are errors here).
JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
JSON_KEYS = st.sampled_from(["messages", "stream", "content", "role", "usage", "x"])
JSON_DOCUMENTS: st.SearchStrategy[Any] = st.deferred(
    lambda: (JSON_SCALARS | st.lists(JSON_DOCUMENTS, max_size=4)
             | st.dictionaries(JSON_KEYS, JSON_DOCUMENTS, max_size=4)))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(document=JSON_DOCUMENTS)
def test_any_json_document_is_forwarded_never_a_proxy_error(shared_rig: Rig, document: Any) -> None:
    with httpx.Client(timeout=30) as client:
        response = client.post(chat_url(shared_rig), json=document)
    assert response.status_code in (200, 400)
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        assert response.text.endswith("data: [DONE]\n\n")
    assert shared_rig.proxy.in_flight == 0


@pytest.fixture(scope="module")
def shared_rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    root = tmp_path_factory.mktemp("shared")
    rig = make_faults_rig(root, capture=BodyCapture(root / "capture", 1 << 20))
    yield rig
    rig.close()


def test_a_chunked_body_over_the_limit_is_refused_and_not_forwarded(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(max_body_bytes=64 * 1024)

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit must hold on what actually arrives
        for _ in range(256):
            yield b"x" * 65536

    with httpx.Client(timeout=30) as client:
        try:
            status = client.post(chat_url(rig), content=chunks()).status_code
        except httpx.WriteError:  # the proxy answered 413 and closed while we were still sending
            status = 413
    assert status == 413
    assert rig.fake.requests == [] and works(rig)


def raw_connection(rig: Rig) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", rig.front.port), timeout=30)
    return sock


def closed_by_server(sock: socket.socket) -> bytes:
    """Everything the server sent until it closed the connection."""
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


def test_a_body_that_trickles_in_is_refused_and_frees_the_connection(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(body_timeout_s=1.0)
    with raw_connection(rig) as slow:
        slow.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{\"messages\"")
        assert works(rig)  # others are served while this one dawdles
        answer = slow.recv(65536)
    assert answer.startswith(b"HTTP/1.1 408")
    assert rig.fake.requests[0]["body"]["stream"] is True and len(rig.fake.requests) == 1
    eventually(rig.settled, "the proxy to settle")


def test_slowloris_connections_are_closed_and_others_are_served(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(header_timeout_s=1.0)
    sockets = [raw_connection(rig) for _ in range(40)]
    try:
        for index, sock in enumerate(sockets):
            if index % 2:  # half send part of a request line and headers, half nothing at all
                sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        assert works(rig)
        for sock in sockets:
            sock.settimeout(30)
            assert closed_by_server(sock) == b""
    finally:
        for sock in sockets:
            sock.close()
    assert works(rig)


def test_keep_alive_connections_survive_the_header_deadline_between_requests(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(header_timeout_s=1.0)
    with httpx.Client(timeout=30) as client:
        for _ in range(3):  # one connection, each request well inside the deadline
            assert client.post(chat_url(rig), json=chat_body()).status_code == 200


# ---- bad input: clients that leave -------------------------------------------------------------------


def test_a_client_that_leaves_while_held_is_never_forwarded(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig()
    rig.front.call(lambda: rig.proxy.pause(60))
    with httpx.Client(timeout=0.5) as client, pytest.raises(httpx.ReadTimeout):
        client.post(chat_url(rig), json=chat_body())
    eventually(lambda: rig.proxy.in_flight == 0, "the held request to be dropped")
    rig.front.call(rig.proxy.resume)
    assert works(rig)
    assert len(rig.fake.requests) == 1  # only the later one: the abandoned request cost the backend nothing
    assert [r.status for r in rig.records()] == [499, 200]


def test_a_client_that_leaves_a_long_non_streamed_request_frees_the_backend(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig()
    with httpx.Client(timeout=0.5) as client, pytest.raises(httpx.ReadTimeout):
        client.post(chat_url(rig), json=chat_body(x_fake_hang_before_answer=True))
    eventually(lambda: rig.fake.abandoned == 1, "the proxy to hang up on the backend")
    eventually(rig.settled, "the proxy to settle")
    assert rig.records()[0].status == 499
    assert works(rig)


# ---- security ------------------------------------------------------------------------------------


def test_only_a_listen_address_off_loopback_is_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="specd"):
        for host in ("127.0.0.1", "::1", "localhost"):
            bind_tcp(host, 0).close()
        assert caplog.records == []
        port = free_port()
        bind_tcp("0.0.0.0", port).close()
    [warning] = caplog.records
    assert f"0.0.0.0:{port} ([proxy] listen)" in warning.getMessage() and "other machines" in warning.getMessage()


def test_the_proxy_listens_on_loopback_unless_told_otherwise(tmp_path: Path) -> None:
    path = tmp_path / "specd.toml"
    path.write_text(f'unit = "u.service"\nscope = "user"\nprofiles_dir = "{tmp_path}"\n\n[proxy]\n')
    proxy = load_config(path).deployment().proxy
    assert proxy is not None and proxy.listen_host == "127.0.0.1"


def test_api_keys_reach_the_backend_and_never_a_log_line_or_the_state_db(
        make_rig: Callable[..., Rig], tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    capture = BodyCapture(tmp_path / "capture", 1 << 20)
    rig = make_rig(capture=capture, hold_timeout_s=0.5)
    headers = {"Authorization": f"Bearer {SECRET}", "X-Api-Key": SECRET}
    with caplog.at_level(logging.DEBUG), httpx.Client(timeout=30, headers=headers) as client:
        assert client.post(chat_url(rig), json=chat_body()).status_code == 200
        assert read_stream(client, chat_url(rig), chat_body(stream=True), headers)[-1] == "[DONE]"
        assert client.post(chat_url(rig), content=b"{broken").status_code == 400
        assert client.post(f"{chat_url(rig)}?api_key={SECRET}", json=chat_body()).status_code == 200
        rig.fake.drop_stream_after = 2
        assert "error" in read_stream(client, chat_url(rig), chat_body(stream=True), headers)[-1]
        rig.backend.stop()  # held, then 503 past the hold timeout
        assert client.post(chat_url(rig), json=chat_body()).status_code == 503
        rig.recorder.flush()
    assert len(rig.fake.requests) == 5  # all but the one held past the hold timeout reached the backend
    assert all(r["headers"]["authorization"] == f"Bearer {SECRET}" for r in rig.fake.requests)
    assert all(r["headers"]["x-api-key"] == SECRET for r in rig.fake.requests)
    ours = [r for r in caplog.records if r.threadName != threading.current_thread().name]  # not this test's client
    assert sum(r.getMessage().startswith("forwarded ") for r in ours) == 6  # each forward was logged (DEBUG)
    logged = "\n".join(f"{r.getMessage()} {r.args!r} {r.exc_text or ''}" for r in ours)
    assert SECRET not in logged
    rig.recorder.close()
    capture.close()
    assert len(capture.read_all()) == 5  # every JSON chat body was captured ("{broken" is not JSON)
    stored = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    assert SECRET.encode() not in stored  # state DB (and its WAL) and captured bodies


def test_captured_bodies_stay_private_even_if_the_file_was_made_readable(tmp_path: Path) -> None:
    directory = tmp_path / "capture"
    directory.mkdir(mode=0o755)
    capture = BodyCapture(directory, 1 << 20)
    capture.path.write_text("")
    os.chmod(capture.path, 0o644)
    assert capture.write(chat_body("private words"))
    assert stat.S_IMODE(os.stat(capture.path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700


def test_a_symlink_planted_as_the_capture_file_is_not_written_through(tmp_path: Path) -> None:
    capture = BodyCapture(tmp_path / "capture", 1 << 20)
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    capture.path.symlink_to(victim)
    assert capture.write(chat_body("private words")) is False and capture.skipped == 1
    assert victim.read_text() == "untouched"


# ---- every CLI verb of the daemon half with wrong arguments ----------------------------------------------


@pytest.fixture(scope="module")
def cli_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("cli")
    profiles = root / "profiles"
    shutil.copytree(REPO / "profiles" / "tiny", profiles)  # valid profiles: only the argument is wrong
    config = root / "specd.toml"
    config.write_text(f'unit = "llama-x.service"\nscope = "user"\nprofiles_dir = "{profiles}"\n\n'
                      '[proxy]\nlisten = "127.0.0.1:9"\n')
    return {**os.environ, "SPECD_CONFIG": str(config), "XDG_STATE_HOME": str(root / "state"),
            "XDG_CONFIG_HOME": str(root / "config"), "DBUS_SESSION_BUS_ADDRESS": f"unix:path={root}/no-bus"}


WRONG_ARGUMENTS = [
    "daemon --bogus", "daemon extra", "daemon --unit nope.service", "daemon --config /nonexistent.toml",
    "traffic --since banana", "traffic --since -5h", "traffic --since 1e400d", "traffic --unit nope.service",
    "traffic --unit", "bench --n abc", "bench --n -3", "bench --workload nonexistent",
    "bench --workload code nonexistent", "bench --workload code ../../etc/passwd", "tune --bogus",
    "tune --margin 2", "tune --margin nan", "tune --workload /nonexistent.jsonl", "pin", "pin nonexistent",
    "pin ../x", "pin a b", "unpin extra",
    "bench --workload code --n 0", "bench --workload code --max-tokens -5", "tune --workload code --n 0",
    "tune --workload code --profile nonexistent",
]


@pytest.mark.parametrize("args", WRONG_ARGUMENTS)
def test_wrong_arguments_exit_2_without_a_traceback(cli_env: dict[str, str], args: str,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """`specd ARGS` as the console script runs it (specd.cli.main: its error handling included),
    in this process: a subprocess per case cost a second of imports each."""
    for key, value in cli_env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(sys, "argv", ["specd", *args.split()])
    sigterm = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(SystemExit) as exited:
            main()
    finally:
        signal.signal(signal.SIGTERM, sigterm)
    output = capsys.readouterr()
    assert exited.value.code == 2, f"{output.out}\n{output.err}"
    assert "Traceback" not in output.out + output.err and output.err.strip()


# ---- a backend that answers an error or garbage; many clients at once ---------------------------


def test_a_backend_500_is_passed_on_once_and_the_next_request_is_served(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig()
    body = chat_body(x_fake_status=500, x_fake_raw='{"error":{"message":"boom"}}')
    reply = httpx.post(chat_url(rig), json=body, timeout=30)
    assert reply.status_code == 500 and reply.json() == {"error": {"message": "boom"}}
    assert len(rig.fake.requests) == 1  # an answer is an answer: never re-sent
    assert httpx.post(chat_url(rig), json=chat_body(), timeout=30).status_code == 200
    eventually(lambda: [r.status for r in rig.records()] == [500, 200], "both requests recorded with their status")


def test_invalid_json_from_the_backend_reaches_the_client_as_sent(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig()
    garbage = '{"choices": [ not json'
    reply = httpx.post(chat_url(rig), json=chat_body(x_fake_status=200, x_fake_raw=garbage), timeout=30)
    assert reply.status_code == 200 and reply.text == garbage
    assert len(rig.fake.requests) == 1 and works(rig)


def test_300_clients_at_once_each_get_one_answer_and_reach_the_backend_once(make_rig: Callable[..., Rig]) -> None:
    import asyncio

    rig = make_rig()

    async def burst() -> list[int]:
        limits = httpx.Limits(max_connections=300, max_keepalive_connections=0)
        async with httpx.AsyncClient(timeout=60, limits=limits) as client:
            replies = await asyncio.gather(*(client.post(chat_url(rig), json=chat_body(f"client {i}"))
                                             for i in range(300)))
        return [reply.status_code for reply in replies]

    statuses = asyncio.run(burst())
    assert statuses == [200] * 300
    texts = sorted(r["body"]["messages"][0]["content"] for r in rig.fake.requests)
    assert texts == sorted(f"client {i}" for i in range(300))  # none lost, none sent twice
    eventually(rig.settled, "the proxy to settle")
