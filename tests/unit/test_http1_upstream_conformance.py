"""HTTP/1.1 conformance through the whole proxy: its server in front, its upstream client
(specd.proxy.http1.client) behind, a FAKE backend that answers with hand-written bytes.

The cases of test_http1_conformance.py that meet the upstream client (HEAD, 204, header values,
raw targets, framing) and the ones only a proxy has: hop-by-hop headers, `Connection:`-named
headers (RFC 9110 §7.6.1), trailers in both directions, a response body delimited by the
backend's close (RFC 9112 §6.3: a valid end, not a drop), too short and too long bodies, answers
that are not HTTP. The backend is FakeScriptedBackend (tests/fakes/http1_raw.py): llama-server
sends none of these framings on demand.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from specd.proxy.proxy import Backend, Proxy, ProxySettings
from specd.traffic.records import Recorder, fetch_records, open_db
from tests.fakes.http1_raw import FakeScriptedBackend, talk
from tests.fakes.proxy_fakes import ServerThread, eventually, free_port

CLOSE = FakeScriptedBackend.CLOSE


@dataclass
class Through:
    backend: FakeScriptedBackend
    front: ServerThread
    proxy: Proxy
    recorder: Recorder
    db: Path

    @property
    def port(self) -> int:
        return self.front.port

    def script(self, path: bytes, answer: bytes) -> bytes:
        self.backend.scripts[path] = answer
        return path

    def forwarded(self, path: bytes) -> list[bytes]:
        """The raw requests the backend read for `path`."""
        return [r for r in self.backend.requests if r.split(b" ", 2)[1].split(b"?")[0] == path]


@pytest.fixture(scope="module")
def through(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Through]:
    backend = FakeScriptedBackend()
    db = tmp_path_factory.mktemp("through") / "state.db"
    recorder = Recorder(db)
    proxy = Proxy(ProxySettings(health_poll_s=0.05, unit="t", hold_timeout_s=10), lambda: Backend(backend.url, "p"),
                  recorder=recorder)
    front = ServerThread(proxy, free_port()).start()
    yield Through(backend, front, proxy, recorder, db)
    front.stop()
    backend.stop()
    recorder.close()


def get(path: bytes, *extra: bytes, method: bytes = b"GET") -> bytes:
    return b"%b %b HTTP/1.1\r\nHost: x\r\n%b\r\n" % (method, path, b"".join(line + b"\r\n" for line in extra))


def test_a_head_answer_keeps_the_backends_content_length(through: Through) -> None:
    """The probe: `content-length: 0` came back instead of the backend's length (RFC 9110 §9.3.2:
    a HEAD answer's length is the GET's)."""
    path = through.script(b"/head", b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 1234\r\n\r\n")
    result = talk(through.port, get(path, method=b"HEAD") + get(b"/health"), ["HEAD", "GET"])
    head, after = result.answers
    assert head.status == 200 and head.header(b"content-length") == b"1234" and head.body == b""
    assert after.status == 200 and not result.closed


def test_a_204_from_the_backend_reaches_the_client_without_a_content_length(through: Through) -> None:
    path = through.script(b"/nocontent", b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\nx-kept: yes\r\n\r\n")
    result = talk(through.port, get(path) + get(b"/health"), ["GET", "GET"])
    first, after = result.answers
    assert first.status == 204 and not first.has(b"content-length") and first.header(b"x-kept") == b"yes"
    assert after.status == 200


def test_headers_named_in_connection_stay_on_their_hop_both_ways(through: Through) -> None:
    path = through.script(b"/hop", b"HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Backend-Hop\r\n"
                                   b"X-Backend-Hop: private\r\nX-End-To-End: 1\r\ncontent-length: 2\r\n\r\nok")
    [answer] = talk(through.port, get(path, b"Connection: X-Client-Hop,keep-alive", b"X-Client-Hop: secret",
                                      b"X-Passed: 1")).answers
    [forwarded] = through.forwarded(path)
    assert b"x-client-hop" not in forwarded.lower() and b"x-passed: 1" in forwarded.lower()
    assert not answer.has(b"x-backend-hop") and answer.header(b"x-end-to-end") == b"1" and answer.body == b"ok"


def test_a_body_ended_by_the_backends_close_is_whole_not_a_502(through: Through) -> None:
    """The probe: an upstream body ended by the connection closing was treated as a drop (502)."""
    path = through.script(b"/closed", b'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n{"whole": true}'
                          + CLOSE)
    [answer] = talk(through.port, get(path)).answers
    assert answer.status == 200 and answer.body == b'{"whole": true}'


def test_a_stream_ended_by_the_backends_close_arrives_whole_with_a_proper_end(through: Through) -> None:
    path = through.script(b"/closed-stream", b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n"
                                             b"data: {\"content\": \"a\"}\n\ndata: [DONE]\n\n" + CLOSE)
    [answer] = talk(through.port, get(path)).answers
    assert answer.status == 200 and answer.body == b'data: {"content": "a"}\n\ndata: [DONE]\n\n'


def test_response_trailers_are_not_turned_into_headers(through: Through) -> None:
    path = through.script(b"/trailers", b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n"
                                        b"\r\n5;ext=1\r\nhello\r\n0\r\nX-Trailer: late\r\n\r\n")
    [answer] = talk(through.port, get(path)).answers
    assert answer.body == b"hello" and not answer.has(b"x-trailer")


def test_request_trailers_are_not_forwarded_and_the_body_is_reframed(through: Through) -> None:
    """The probe: a trailer `Authorization:` reached the backend as a header."""
    path = through.script(b"/reframed", b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
    raw = (b"POST /reframed HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
           b"3\r\nabc\r\n0\r\nAuthorization: Bearer smuggled\r\n\r\n")
    assert talk(through.port, raw).answers[0].status == 200
    [forwarded] = through.forwarded(path)
    head, _, body = forwarded.partition(b"\r\n\r\n")
    assert b"smuggled" not in forwarded and b"transfer-encoding" not in head.lower()
    assert b"content-length: 3" in head.lower() and body == b"abc"


def test_an_informational_answer_before_the_final_one_is_skipped(through: Through) -> None:
    path = through.script(b"/informational", b"HTTP/1.1 100 Continue\r\n\r\n"
                                             b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nfinal")
    [answer] = talk(through.port, get(path)).answers
    assert answer.status == 200 and answer.body == b"final"


def test_a_body_shorter_than_its_length_is_a_502(through: Through) -> None:
    path = through.script(b"/short", b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nxxx" + CLOSE)
    [answer] = talk(through.port, get(path)).answers
    assert answer.status == 502


def test_a_body_longer_than_its_length_is_cut_at_the_length(through: Through) -> None:
    path = through.script(b"/long", b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nxxxyyyyyyy")
    result = talk(through.port, get(path) + get(b"/health"), ["GET", "GET"])
    assert result.answers[0].body == b"xxx" and result.answers[1].status == 200 and b"yyy" not in result.raw


INVALID_ANSWERS = {
    "bad-status": b"HTTP/1.1 2000 Nope\r\n\r\n",
    "not-http": b"I am no HTTP\r\n\r\n",
    "obs-fold": b"HTTP/1.1 200 OK\r\nX-A: 1\r\n  folded: smuggled\r\ncontent-length: 0\r\n\r\n",
    "length-and-chunked": b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n",
    "bad-chunk-after-the-head": b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
}


@pytest.mark.parametrize("name", list(INVALID_ANSWERS))
def test_an_answer_that_is_not_valid_http_is_a_502_sent_once(through: Through, name: str) -> None:
    path = through.script(b"/invalid-" + name.encode(), INVALID_ANSWERS[name])
    result = talk(through.port, get(path))
    assert result.answers[0].status == 502 and b"smuggled" not in result.raw
    assert len(through.forwarded(path)) == 1


@pytest.mark.parametrize("answer", [b"HTTP/1.1 204 No Content\r\nx-a: 1\r\n\r\n",
                                    b"HTTP/1.1 304 Not Modified\r\netag: \"v1\"\r\n\r\n"], ids=["204", "304"])
def test_a_204_or_304_without_a_length_ends_at_its_head_not_at_the_backends_close(through: Through,
                                                                                   answer: bytes) -> None:
    """RFC 9112 §6.3: these answers have no body, whatever framing they lack; the backend keeps the connection."""
    path = through.script(b"/bare-" + answer[9:12], answer)
    result = talk(through.port, get(path) + get(b"/health"), ["GET", "GET"])
    assert [a.status for a in result.answers] == [int(answer[9:12]), 200] and not result.closed


def test_header_values_from_the_backend_pass_byte_for_byte(through: Through) -> None:
    path = through.script(b"/chars", b"HTTP/1.1 200 OK\r\nkey: <\t \xc2\xb5>\r\ncontent-length: 2\r\n\r\nok")
    result = talk(through.port, get(path))
    assert b"\r\nkey: <\t \xc2\xb5>\r\n" in result.raw


def test_the_raw_target_is_forwarded_as_sent(through: Through) -> None:
    path = through.script(b"/one%2Ftwo%2Dthree", b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
    talk(through.port, get(b"/one%2Ftwo%2Dthree?a=b&c"))
    assert through.backend.requests[-1].startswith(b"GET /one%2Ftwo%2Dthree?a=b&c HTTP/1.1\r\n")
    assert through.forwarded(path)


def test_a_query_string_is_never_recorded_or_logged(through: Through, caplog: pytest.LogCaptureFixture) -> None:
    """The probe: `?api_key=...` went into the traffic table's endpoint and into a 33 MB log line."""
    through.script(b"/v1/chat/completions", b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n{}" + CLOSE)
    through.script(b"/dropped", b"" + CLOSE)
    body = b'{"messages": [{"role": "user", "content": "hi"}]}'
    with caplog.at_level(logging.DEBUG, logger="specd"):
        for target in (b"/v1/chat/completions?api_key=sk-secret-1", b"http://h:99999/v1/x?api_key=sk-secret-2",
                       b"/dropped?api_key=sk-secret-3"):
            raw = b"POST %b HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%b" % (target, len(body), body)
            talk(through.port, raw)
    through.recorder.flush()
    rows = fetch_records(open_db(through.db), 0)
    assert {r.endpoint for r in rows} >= {"/v1/chat/completions", "http://h:99999/v1/x", "/dropped"}
    assert not any("sk-secret" in repr(r) for r in rows)
    assert not any("sk-secret" in record.getMessage() for record in caplog.records)


def test_an_ambiguous_request_never_reaches_the_backend(through: Through) -> None:
    path = through.script(b"/smuggle", b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
    raw = (b"POST /smuggle HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
           b"0\r\n\r\nGET /smuggle HTTP/1.1\r\nHost: x\r\n\r\n")
    result = talk(through.port, raw, until_closed=True)
    assert result.answers[0].status == 400 and through.forwarded(path) == []


def test_consecutive_requests_share_one_backend_connection(through: Through) -> None:
    path = through.script(b"/kept", b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
    result = talk(through.port, get(path) * 3, ["GET"] * 3)
    assert [a.body for a in result.answers] == [b"ok"] * 3
    connections = [c for r, c in zip(through.backend.requests, through.backend.connection_of_request, strict=True)
                   if r.split(b" ", 2)[1] == path]
    assert len(connections) == 3 and len(set(connections)) == 1  # kept alive, not a connection per request


def test_connections_the_backend_closes_are_not_kept_by_the_pool(through: Through) -> None:
    """The pool's set of open connections (what it closes at shutdown) lets go of each closed one: over a
    day of a backend that closes after every answer it stays small."""
    path = through.script(b"/closing", b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok" + CLOSE)
    for _ in range(6):
        assert talk(through.port, get(path), ["GET"]).answers[0].body == b"ok"
    assert len(through.forwarded(path)) == 6
    eventually(lambda: through.front.call(lambda: len(through.proxy._upstream._open)) <= 2,
               "the pool to let go of the closed connections")


def test_after_an_answer_that_says_connection_close_the_next_request_goes_on_a_new_connection(
        through: Through) -> None:
    path = through.script(b"/last", b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
    for _ in range(2):  # the backend (a FAKE) keeps reading the socket all the same: the proxy must not
        assert talk(through.port, get(path), ["GET"]).answers[0].body == b"ok"
    connections = [c for r, c in zip(through.backend.requests, through.backend.connection_of_request, strict=True)
                   if r.split(b" ", 2)[1] == path]
    assert len(connections) == 2 and connections[0] != connections[1]


def test_a_backend_on_another_loopback_address_is_reached_there(tmp_path: Path) -> None:
    backend = FakeScriptedBackend(host="127.0.0.2")  # a server bound to one address, as `--host 10.0.0.5` binds
    backend.scripts[b"/here"] = b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nhere"
    recorder = Recorder(tmp_path / "state.db")
    proxy = Proxy(ProxySettings(health_poll_s=0.05, unit="t", hold_timeout_s=10), lambda: Backend(backend.url, "p"),
                  recorder=recorder)
    front = ServerThread(proxy, free_port()).start()
    try:
        assert talk(front.port, get(b"/here"), ["GET"]).answers[0].body == b"here"
    finally:
        front.stop()
        backend.stop()
        recorder.close()


def test_a_request_dropped_on_a_kept_alive_connection_is_sent_once_more_on_a_new_one(through: Through) -> None:
    """The keep-alive race: the backend closes a pooled connection as the next request goes out on it. The
    re-send rule (specd.proxy.resend) sends it again, once, on a fresh connection, and the client never knows."""
    calls: list[int] = []

    def first_answers_second_drops(request: bytes) -> bytes:
        calls.append(len(calls))
        return CLOSE if len(calls) == 2 else b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"

    path = through.script(b"/race", first_answers_second_drops)
    assert talk(through.port, get(path), ["GET"]).answers[0].body == b"ok"  # leaves the connection in the pool
    assert talk(through.port, get(path), ["GET"]).answers[0].body == b"ok"  # dropped, then sent again
    connections = [c for r, c in zip(through.backend.requests, through.backend.connection_of_request, strict=True)
                   if r.split(b" ", 2)[1] == path]
    assert len(connections) == 3 and connections[0] == connections[1] != connections[2]
