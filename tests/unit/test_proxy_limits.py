"""The proxy's limits, as a server facing clients needs them: open files, connections, the watchdog,
and a recorder that can never fail a request. Raw sockets; the proxy under a low open-files limit
runs in a process of its own (tests/fakes/proxy_process.py) so the limit is its alone.

The probes behind each case (issue 32): ~1,000 idle connections used up the daemon's 1,024 open
files and the watchdog ping's EMFILE ended the daemon; a ~970-deep nested array in a chat message
made the recorder raise RecursionError, so a stream never got its end, a non-stream answer became a
500, and the in-flight count never fell.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import select
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from specd.daemon.service import raise_open_files_limit
from specd.proxy.http1.listener import EVICT_BATCH, FrontServer, connection_budget
from specd.proxy.proxy import Backend, Proxy, ProxySettings
from specd.traffic.records import Recorder, fetch_records, open_db
from tests.conftest import REPO
from tests.fakes.http1_raw import FakeScriptedBackend, hold_idle, parse_answers, talk
from tests.fakes.proxy_fakes import FakeBackendForProxyTests, ServerThread, chat_body, eventually, free_port

NOFILE = 128


class ProxyProcess:
    def __init__(self, backend_url: str, *args: str) -> None:
        self.port = free_port()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.fakes.proxy_process", "--backend", backend_url, "--port", str(self.port),
             *args], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)})
        assert self.process.stdout is not None
        self.files = self.process.stdout.readline().split()[1:]
        ready = self.process.stdout.readline().strip()
        assert ready == "ready", self.process.stderr.read() if self.process.stderr else ""

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> str:
        self.process.kill()
        _, stderr = self.process.communicate(timeout=30)
        return stderr


@pytest.fixture
def backend() -> Iterator[ServerThread]:
    server = ServerThread(FakeBackendForProxyTests(tokens=3).app, free_port()).start()
    yield server
    server.stop()


def chat_request(text: str = "hi") -> bytes:
    body = json.dumps(chat_body(text)).encode()
    return b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" \
           b"Content-Length: %d\r\n\r\n%b" % (len(body), body)


def test_twice_the_open_files_limit_of_idle_connections_leave_a_normal_request_answered(
        backend: ServerThread) -> None:
    """At its connection cap (below what the open-files limit leaves) the server closes the oldest
    idle connections to make room, as nginx does: the new client is answered."""
    proxy = ProxyProcess(backend.url, "--nofile", str(NOFILE))
    held: list[socket.socket] = []
    try:
        held = hold_idle(proxy.port, 2 * NOFILE)
        [answer] = talk(proxy.port, chat_request()).answers
        assert answer.status == 200 and json.loads(answer.body)["choices"]
        assert proxy.alive()
        [again] = talk(proxy.port, chat_request("again")).answers
        assert again.status == 200
    finally:
        for sock in held:
            sock.close()
        stderr = proxy.stop()
    assert "idle one(s) to make room" in stderr


def test_the_server_keeps_accepting_after_it_ran_out_of_files(backend: ServerThread) -> None:
    """With no cap below the limit, accept() meets EMFILE: the listener drops what it cannot take
    and goes on; once the idle connections go, clients are served again."""
    proxy = ProxyProcess(backend.url, "--nofile", "64", "--max-connections", "100000")
    held = hold_idle(proxy.port, 200)
    try:
        for sock in held:
            sock.close()
        held = []
        eventually(lambda: talk(proxy.port, chat_request()).answers[:1] != [], "the proxy to answer again", 60)
        assert talk(proxy.port, chat_request()).answers[0].status == 200 and proxy.alive()
    finally:
        for sock in held:
            sock.close()
        proxy.stop()


def test_at_the_cap_with_every_connection_busy_a_new_client_gets_a_503_with_retry_after(tmp_path: Path) -> None:
    fake = FakeBackendForProxyTests()
    backend = ServerThread(fake.app, free_port()).start()
    proxy = Proxy(ProxySettings(unit="t", health_poll_s=0.05, max_connections=3),
                  lambda: Backend(backend.url, "plain"))
    front = ServerThread(proxy, free_port()).start()
    busy: list[socket.socket] = []
    try:
        hang = json.dumps(chat_body(x_fake_hang_before_answer=True)).encode()
        for _ in range(3):
            sock = socket.create_connection(("127.0.0.1", front.port), timeout=20)
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%b"
                         % (len(hang), hang))
            busy.append(sock)
        eventually(lambda: proxy.active == 3, "three requests to be with the backend")
        refused = talk(front.port, chat_request(), until_closed=True)
        assert refused.answers[0].status == 503 and refused.answers[0].header(b"retry-after") == b"1"
        assert b"too many client connections" in refused.answers[0].body
        busy.pop().close()  # one client leaves: its place is free again
        eventually(lambda: proxy.active == 2, "the proxy to let go of the request whose client left")
        assert talk(front.port, chat_request()).answers[0].status == 200
    finally:
        for sock in busy:
            sock.close()
        front.stop()
        backend.stop()


def test_at_the_cap_the_oldest_idle_connections_make_room_and_busy_ones_are_kept(
        backend: ServerThread, caplog: pytest.LogCaptureFixture) -> None:
    """In the test's own process (the listener's choices seen from inside): with the cap reached, a
    new client closes the oldest idle connections, a batch of EVICT_BATCH, never a busy one."""
    cap = EVICT_BATCH + 8
    proxy = Proxy(ProxySettings(unit="t", health_poll_s=0.05, max_connections=cap),
                  lambda: Backend(backend.url, "plain"))
    front = ServerThread(proxy, free_port()).start()
    listener = front.server
    assert isinstance(listener, FrontServer)
    held: list[socket.socket] = []
    busy = socket.create_connection(("127.0.0.1", front.port), timeout=30)
    try:
        hang = json.dumps(chat_body(x_fake_hang_before_answer=True)).encode()
        busy.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%b"
                     % (len(hang), hang))
        eventually(lambda: proxy.active == 1, "the busy request to reach the backend")
        for opened in range(cap - 1):  # one at a time, so their ages are in this order
            held.extend(hold_idle(front.port, 1))
            eventually(lambda opened=opened: listener.open_connections == opened + 2, "the connection to be taken")
        with caplog.at_level(logging.WARNING, logger="specd"):
            assert talk(front.port, chat_request()).answers[0].status == 200
        assert listener.evicted == EVICT_BATCH
        assert "closed 32 idle one(s) to make room" in caplog.text
        # the oldest: closed by the server (which ones were, when not exactly these, is the message)
        assert closed_by_server(held, expected=EVICT_BATCH) == list(range(EVICT_BATCH))
        for sock in held[EVICT_BATCH:]:  # the newest: still served
            sock.sendall(chat_request("still here"))
            assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
        # the cap again, within the minute of the first warning: room is made again (one warning line)
        eventually(lambda: listener.open_connections == 1 + cap - 1 - EVICT_BATCH, "the closed ones to be gone")
        while listener.open_connections < cap:
            held.extend(hold_idle(front.port, 1))
            expected = len(held) - EVICT_BATCH + 1  # the busy one and every idle one not closed
            eventually(lambda expected=expected: listener.open_connections >= expected, "the connection")
        assert talk(front.port, chat_request("again")).answers[0].status == 200
        assert listener.evicted == 2 * EVICT_BATCH
        busy.setblocking(False)
        with pytest.raises(BlockingIOError):  # the busy one is open, its answer still owed
            busy.recv(1)
        busy.close()  # its client leaves: the request is let go
        eventually(lambda: proxy.active == 0, "the busy request to be let go")
    finally:
        for sock in [busy, *held]:  # closed whatever failed (a leaked socket's warning fails the next test)
            sock.close()
        front.stop()


def closed_by_server(sockets: list[socket.socket], expected: int, deadline_s: float = 30.0) -> list[int]:
    """The positions of the sockets the server has closed (EOF readable), once `expected` of them are or the
    deadline passes; nothing is read from a socket that is still open."""
    at_eof: set[int] = set()
    give_up = time.monotonic() + deadline_s
    while len(at_eof) < expected and time.monotonic() < give_up:
        waiting = [s for i, s in enumerate(sockets) if i not in at_eof]
        readable, _, _ = select.select(waiting, [], [], 0.5)
        for sock in readable:
            if sock.recv(1, socket.MSG_PEEK) == b"":
                at_eof.add(sockets.index(sock))
    return sorted(at_eof)


def test_the_start_raises_the_soft_open_files_limit_to_the_hard_one(backend: ServerThread) -> None:
    proxy = ProxyProcess(backend.url, "--nofile", "256", "--hard", "1024")
    try:
        assert proxy.files == ["1024", "1024"]
    finally:
        proxy.stop()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert raise_open_files_limit() == (hard, hard) or soft == resource.RLIM_INFINITY


def test_the_connection_budget_leaves_room_for_a_backend_connection_each() -> None:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    in_use = len(os.listdir("/proc/self/fd"))
    assert connection_budget() * 2 + in_use <= soft or connection_budget() == 16


def test_a_watchdog_ping_needs_no_new_file_and_never_raises(tmp_path: Path) -> None:
    """The probe: with the open-files limit used up, the ping's socket() raised EMFILE, uncaught,
    and the daemon exited. The ping's socket is opened once; a ping that cannot go is logged."""
    receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    address = tmp_path / "notify.sock"
    receiver.bind(str(address))
    receiver.settimeout(30)
    script = textwrap.dedent("""
        import os, resource
        from specd.daemon.service import notify
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
        assert notify("READY=1")
        hog = []
        try:
            while True:
                hog.append(open(os.devnull))
        except OSError as exc:
            assert exc.errno == 24
        assert notify("WATCHDOG=1")  # out of files, and the ping still goes
        os.environ["NOTIFY_SOCKET"] = "/nonexistent/notify.sock"
        assert notify("WATCHDOG=1") is False  # cannot go: False, not an exception
        print("ok")
    """)
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60,
                            check=False, env={**os.environ, "NOTIFY_SOCKET": str(address), "PYTHONPATH": str(REPO)})
    assert result.stdout.strip() == "ok", result.stderr
    assert [receiver.recv(100), receiver.recv(100)] == [b"READY=1", b"WATCHDOG=1"]
    receiver.close()


# ---- a recorder that can never fail a request -----------------------------------------------------

_EVENTS = [b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n', b"data: [DONE]\n\n"]
STREAMED = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
            + b"".join(b"%x\r\n%b\r\n" % (len(event), event) for event in _EVENTS) + b"0\r\n\r\n")
_WHOLE_BODY = b'{"choices": [{"message": {"content": "x"}}], "usage": {"completion_tokens": 1}}'
WHOLE = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%b" % (
    len(_WHOLE_BODY), _WHOLE_BODY)


def answer_of(request: bytes) -> bytes:
    return STREAMED if b'"stream": true' in request[:200] else WHOLE


def deep_body(depth: int, stream: bool) -> bytes:
    head = b'{"stream": %b, "model": "m", "messages": [{"role": "user", "content": ' % (b"true" if stream else b"false")
    return head + b"[" * depth + b"]" * depth + b"}]}"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Proxy, ServerThread, Recorder, Path]]:
    backend = FakeScriptedBackend()
    backend.scripts[b"/v1/chat/completions"] = answer_of
    db = tmp_path_factory.mktemp("recorded") / "state.db"
    recorder = Recorder(db)
    proxy = Proxy(ProxySettings(unit="t", health_poll_s=0.05), lambda: Backend(backend.url, "plain"),
                  recorder=recorder)
    front = ServerThread(proxy, free_port()).start()
    yield proxy, front, recorder, db
    front.stop()
    backend.stop()
    recorder.close()


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "not-streamed"])
# 950-990: where json.loads still succeeds and json.dumps (the recorder's) no longer does; 10,000: past both
@pytest.mark.parametrize("depth", [*range(950, 1000, 10), 10_000])
def test_a_deeply_nested_body_gets_the_backends_answer_whole_and_the_count_returns_to_zero(
        recorded: tuple[Proxy, ServerThread, Recorder, Path], depth: int, stream: bool) -> None:
    proxy, front, recorder, db = recorded
    body = deep_body(depth, stream)
    raw = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body)
    result = talk(front.port, raw)
    expected = STREAMED if stream else WHOLE
    [answer] = result.answers
    assert answer.status == 200 and answer.body == parse_answers(expected, ["POST"], True)[0].body
    eventually(lambda: proxy.in_flight == 0 and proxy.active == 0, "the in-flight counts to return to 0")
    recorder.flush()
    conn = open_db(db)
    try:
        rows = list(fetch_records(conn, 0))
    finally:
        conn.close()
    assert rows and rows[-1].status == 200 and rows[-1].endpoint == "/v1/chat/completions"
