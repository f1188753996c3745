"""HTTP/1.1 conformance of the proxy's server (specd.proxy.http1.server), raw bytes in, answers out.

The cases are those uvicorn's `tests/protocols/test_http.py` runs over each of its HTTP
implementations (encode/uvicorn; the ones that are about ASGI — scopes, lifespan, root_path,
receive() after the response — have no counterpart here), written as raw requests against this
server with a small handler in its place (tests/fakes/front_handler.py), plus the request
smuggling forms and the limits a server facing clients needs (RFC 9110/9112, nginx's defaults).
Answers are read with h11, a parser independent of the llhttp one under test. Where a case
meets the proxy's upstream client too, it is in test_http1_upstream_conformance.py.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from specd.proxy.http1.server import MAX_HEAD_BYTES, MAX_TARGET_BYTES
from tests.fakes.front_handler import HandlerForFrontTests
from tests.fakes.http1_raw import read_until_closed, talk
from tests.fakes.proxy_fakes import ServerThread, eventually, free_port

GET = b"GET /echo HTTP/1.1\r\nHost: example.org\r\n\r\n"
POST = b'POST /echo HTTP/1.1\r\nHost: example.org\r\nContent-Type: application/json\r\nContent-Length: 18\r\n\r\n' \
       b'{"hello": "world"}'
CLOSE_GET = b"GET /echo HTTP/1.1\r\nHost: example.org\r\nConnection: close\r\n\r\n"


@pytest.fixture(scope="module")
def front() -> Iterator[tuple[ServerThread, HandlerForFrontTests]]:
    handler = HandlerForFrontTests()
    running = ServerThread(handler, free_port()).start()
    yield running, handler
    running.stop()


@pytest.fixture
def port(front: tuple[ServerThread, HandlerForFrontTests]) -> int:
    return front[0].port


def seen_by_handler(port: int, raw: bytes) -> dict[str, object]:
    """What the handler got for a request to /headers (it answers with it as JSON)."""
    answer = talk(port, raw).answers[0]
    assert answer.status == 200, answer
    seen: dict[str, object] = json.loads(answer.body)
    return seen


# ---- uvicorn's cases ------------------------------------------------------------------------------


def test_get_request(port: int) -> None:
    [answer] = talk(port, GET).answers
    assert answer.status == 200 and answer.header(b"content-length") == b"0"


def test_post_request_body_reaches_the_handler_and_back(port: int) -> None:
    [answer] = talk(port, POST).answers
    assert answer.status == 200 and answer.body == b'{"hello": "world"}'


def test_header_values_with_tab_space_and_non_ascii_go_out_as_given(port: int) -> None:
    result = talk(port, b"GET /unicode-header HTTP/1.1\r\nHost: x\r\n\r\n")
    assert b"\r\nkey: <\t \xc2\xb5>\r\n" in result.raw and result.answers[0].body == b"Hello, world"


def test_head_request_gets_no_body(port: int) -> None:
    result = talk(port, b"HEAD /stream HTTP/1.1\r\nHost: x\r\n\r\n", ["HEAD"])
    assert result.answers[0].status == 200 and result.raw.endswith(b"\r\n\r\n") and b"data:" not in result.raw


@pytest.mark.parametrize("path", [b"/no-content", b"/no-content-stream"])
def test_keepalive_after_a_204_that_carries_no_length_and_no_body(port: int, path: bytes) -> None:
    """RFC 9110 §8.6 / 9112 §6.1: no Content-Length, no Transfer-Encoding in a 204; the connection stays open."""
    result = talk(port, b"GET %b HTTP/1.1\r\nHost: x\r\n\r\n" % path + GET, ["GET", "GET"])
    first, second = result.answers
    assert first.status == 204 and not first.has(b"content-length") and not first.has(b"transfer-encoding")
    assert second.status == 200 and not result.closed
    head = result.raw.split(b"\r\n\r\n", 1)[0].lower()
    assert b"content-length" not in head and b"transfer-encoding" not in head


def test_keepalive_timeout_closes_an_idle_connection(front: tuple[ServerThread, HandlerForFrontTests]) -> None:
    """Answered, kept open for the next request, and closed once idle past the header timeout."""
    server, _ = front
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(GET)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
        sock.sendall(GET)  # still open
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
        assert sock.recv(65536) == b"", "an idle connection must be closed at the header timeout"


def test_pipelined_requests_are_answered_in_order(port: int) -> None:
    result = talk(port, b"".join(b"GET /headers?n=%d HTTP/1.1\r\nHost: x\r\n\r\n" % n for n in (1, 2, 3)), ["GET"] * 3)
    assert [json.loads(a.body)["target"] for a in result.answers] == ["/headers?n=1", "/headers?n=2", "/headers?n=3"]


def test_a_stream_is_chunked_with_one_last_chunk_and_the_connection_stays_open(port: int) -> None:
    result = talk(port, b"GET /stream?n=2 HTTP/1.1\r\nHost: x\r\n\r\n" + GET, ["GET", "GET"])
    stream, after = result.answers
    assert stream.header(b"transfer-encoding") == b"chunked" and stream.body == b"data: 0\n\ndata: 1\n\n"
    assert result.raw.split(b"HTTP/1.1 ")[1].count(b"\r\n0\r\n\r\n") == 1 and after.status == 200
    assert not result.closed


def test_a_head_request_on_a_stream_keeps_the_connection_open(port: int) -> None:
    result = talk(port, b"HEAD /stream HTTP/1.1\r\nHost: x\r\n\r\n" + GET, ["HEAD", "GET"])
    assert [a.status for a in result.answers] == [200, 200] and not result.closed


def test_a_large_post_request_arrives_whole(port: int) -> None:
    body = b"x" * 100_000
    [answer] = talk(port, b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n" + body).answers
    assert answer.body == body


def test_invalid_http_gets_400_and_a_close(port: int) -> None:
    result = talk(port, b"x" * 100_000, until_closed=True)
    assert result.answers[0].status == 400 and result.closed


def test_a_handler_that_raises_gets_a_500(port: int) -> None:
    [answer] = talk(port, b"GET /raise HTTP/1.1\r\nHost: x\r\n\r\n").answers
    assert answer.status == 500


def test_a_handler_that_raises_mid_answer_gets_its_answer_cut_by_a_close_not_a_500(port: int) -> None:
    result = talk(port, b"GET /raise-mid-stream HTTP/1.1\r\nHost: x\r\n\r\n", until_closed=True)
    assert b" 500 " not in result.raw and result.closed and result.answers == []  # no last chunk: cut


def test_a_handler_that_returns_without_answering_gets_a_500(port: int) -> None:
    [answer] = talk(port, b"GET /no-answer HTTP/1.1\r\nHost: x\r\n\r\n").answers
    assert answer.status == 500


def test_a_handler_that_starts_and_returns_gets_its_answer_cut_by_a_close(port: int) -> None:
    result = talk(port, b"GET /start-only HTTP/1.1\r\nHost: x\r\n\r\n", until_closed=True)
    assert result.raw.startswith(b"HTTP/1.1 200 ") and b" 500 " not in result.raw and result.closed


def test_a_second_start_is_refused_and_the_answer_cut(port: int) -> None:
    result = talk(port, b"GET /double-start HTTP/1.1\r\nHost: x\r\n\r\n", until_closed=True)
    assert result.raw.count(b"HTTP/1.1 ") == 1 and result.closed


def test_writes_after_the_end_are_dropped(port: int) -> None:
    result = talk(port, b"GET /write-after-end HTTP/1.1\r\nHost: x\r\n\r\n" + GET, ["GET", "GET"])
    assert result.answers[0].body == b"end" and b"after the end" not in result.raw and b"twice" not in result.raw
    assert result.answers[1].status == 200


def test_a_client_that_leaves_early_is_reported_to_the_handler(
        front: tuple[ServerThread, HandlerForFrontTests]) -> None:
    server, handler = front
    handler.left.clear()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")
        eventually(lambda: any(r.path == "/hold" for r in handler.seen), "the request to reach the handler")
    assert handler.left.wait(20)


def test_http_1_0_request_is_answered_and_closed(port: int) -> None:
    result = talk(port, b"GET /headers HTTP/1.0\r\n\r\n", until_closed=True)
    assert result.raw.startswith(b"HTTP/1.1 200 ") and result.closed


def test_the_raw_target_is_kept_and_the_path_decoded(port: int) -> None:
    seen = seen_by_handler(port, b"GET /headers/one%2Ftwo%2Dthree HTTP/1.1\r\nHost: x\r\n\r\n")
    assert seen["target"] == "/headers/one%2Ftwo%2Dthree" and seen["path"] == "/headers/one/two-three"


def test_expect_100_continue_is_answered_before_the_body(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 18\r\n\r\n")
        assert sock.recv(65536) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(b'{"hello": "world"}')
        assert sock.recv(65536).endswith(b'{"hello": "world"}')


@pytest.mark.parametrize("value", [b"100-Continue", b"100-CONTINUE", b" 100-continue "])
def test_expect_100_continue_is_matched_in_any_case(port: int, value: bytes) -> None:
    """RFC 9110 §10.1.1: the expectation is case-insensitive; a client waiting for 100 must get it."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nExpect: %b\r\nContent-Length: 2\r\n\r\n" % value)
        assert sock.recv(65536) == b"HTTP/1.1 100 Continue\r\n\r\n"


@pytest.mark.parametrize("upgrade", [b"websocket", b"h2c"])
def test_an_upgrade_request_is_answered_as_plain_http(port: int, upgrade: bytes) -> None:
    result = talk(port, b"GET /echo HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: %b\r\n"
                        b"Sec-WebSocket-Version: 11\r\n\r\n" % upgrade, until_closed=True)
    assert result.answers[0].status == 200
    assert result.answers[0].header(b"connection") == b"close" and result.closed  # nothing after it is read


@pytest.mark.parametrize("request_line", [b"G?T / HTTP/1.1", b"GET /?x=y z HTTP/1.1", b"GET / HTTP1.1"],
                         ids=["invalid-method", "invalid-path", "invalid-http-version"])
def test_an_invalid_request_line_gets_400(port: int, request_line: bytes) -> None:
    result = talk(port, request_line + b"\r\nHost: example.org\r\n\r\n", until_closed=True)
    [answer] = result.answers
    assert answer.status == 400 and result.closed and answer.header(b"connection") == b"close"
    assert answer.header(b"content-type") == b"application/json" and not answer.has(b"retry-after")
    assert b"malformed HTTP request" in answer.body


def test_a_request_sent_in_fragments_is_parsed_whole(port: int) -> None:
    raw = b"GET /headers?param=qqqqqqqqqq HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    result = talk(port, [raw[i:i + 7] for i in range(0, len(raw), 7)], until_closed=True)
    assert result.answers[0].status == 200 and json.loads(result.answers[0].body)["target"].endswith("q" * 10)


def test_connection_close_is_answered_with_close(port: int) -> None:
    result = talk(port, CLOSE_GET + GET, until_closed=True)
    [answer] = result.answers
    assert answer.header(b"connection") == b"close" and answer.header(b"content-length") == b"0"
    assert result.raw.count(b"HTTP/1.1 ") == 1  # nothing after a close is read


def test_connection_close_with_a_post_gets_the_body(port: int) -> None:
    raw = b"POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 18\r\n\r\n{'hello': 'world'}"
    result = talk(port, raw, until_closed=True)
    assert result.answers[0].body == b"{'hello': 'world'}" and result.closed


def test_shutdown_answers_the_request_in_progress_then_closes() -> None:
    handler = HandlerForFrontTests()
    server = ServerThread(handler, free_port()).start()
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=20) as sock:
            sock.sendall(b"GET /late HTTP/1.1\r\nHost: x\r\n\r\n")
            assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
            assert server.server is not None
            server.server.should_exit = True
            handler.release.set_result(None)
            rest = b""
            while chunk := sock.recv(65536):
                rest += chunk
            assert rest.endswith(b"late part\r\n0\r\n\r\n")
    finally:
        server.stop()


# ---- the limits and the cases this project's probes found ----------------------------------------


def test_huge_headers_get_431_and_the_connection_closes(port: int) -> None:
    """uvicorn's httptools protocol takes a 64 KiB Cookie (its test says "will always pass"); a
    server facing clients must not: nginx stops at its header buffers, h11 at 16 KiB."""
    result = talk(port, [b"GET /echo HTTP/1.1\r\nHost: example.org\r\nCookie: " + b"x" * 32 * 1024,
                         b"x" * 32 * 1024 + b"\r\n\r\n"], until_closed=True)
    assert result.answers[0].status == 431 and result.closed
    assert result.answers[0].header(b"content-type") == b"application/json"
    error = json.loads(result.answers[0].body)["error"]  # the OpenAI-style error a client's SDK reads
    assert (error["type"], error["code"]) == ("invalid_request_error", 431) and "header" in error["message"]


def test_a_refusal_behind_a_request_in_progress_is_answered_in_its_turn_with_its_error(port: int) -> None:
    bad = b"GET /echo?q=" + b"a" * MAX_TARGET_BYTES + b" HTTP/1.1\r\nHost: x\r\n\r\n"
    result = talk(port, b"GET /stream?n=3 HTTP/1.1\r\nHost: x\r\n\r\n" + bad, ["GET", "GET"], until_closed=True)
    first, refused = result.answers
    assert first.status == 200 and first.body == b"data: 0\n\ndata: 1\n\ndata: 2\n\n"
    error = json.loads(refused.body)["error"]
    assert refused.status == 414 and (error["type"], error["code"]) == ("invalid_request_error", 414)
    assert result.closed


def test_headers_over_the_limit_in_pieces_each_under_it_get_431(port: int) -> None:
    first = b"GET /echo HTTP/1.1\r\nHost: x\r\nX-A: " + b"a" * (MAX_HEAD_BYTES // 2)
    second = b"b" * (MAX_HEAD_BYTES * 2 // 3) + b"\r\n\r\n"  # together over the limit, each under it
    assert in_separate_reads(port, [first, second]).startswith(b"HTTP/1.1 431 ")


def test_headers_just_under_the_limit_are_taken(port: int) -> None:
    head = b"GET /echo HTTP/1.1\r\nHost: x\r\n"
    filler = b"x-fill: " + b"y" * (MAX_HEAD_BYTES - len(head) - 200) + b"\r\n"
    [answer] = talk(port, head + filler + b"\r\n").answers
    assert answer.status == 200


def test_a_target_over_the_limit_gets_414(port: int) -> None:
    result = talk(port, b"GET /echo?q=" + b"a" * MAX_TARGET_BYTES + b" HTTP/1.1\r\nHost: x\r\n\r\n", until_closed=True)
    assert result.answers[0].status == 414 and result.closed


def in_separate_reads(port: int, parts: list[bytes]) -> bytes:
    """`parts` written apart (a pause between them, so the server reads each on its own; were two to arrive as
    one read, the limits below refuse them all the same), then everything the server sends until it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        for part in parts:
            sock.sendall(part)
            time.sleep(0.2)
        return read_until_closed(sock)



def test_a_target_over_the_limit_in_pieces_each_under_it_gets_414_and_one_at_the_limit_is_taken(port: int) -> None:
    piece = b"a" * (MAX_TARGET_BYTES * 3 // 4)
    answer = in_separate_reads(port, [b"GET /echo?q=" + piece, piece + b" HTTP/1.1\r\nHost: x\r\n\r\n"])
    assert answer.startswith(b"HTTP/1.1 414 ") and b"target" in answer
    at_the_limit = b"/echo?q=" + b"a" * (MAX_TARGET_BYTES - len(b"/echo?q="))
    assert talk(port, b"GET " + at_the_limit + b" HTTP/1.1\r\nHost: x\r\n\r\n").answers[0].status == 200


def test_a_target_over_the_limit_sent_without_end_gets_414_not_a_wait(port: int) -> None:
    """A request line that never ends is refused once it passes the head limit: the parser is not
    fed (and does not buffer) what comes after."""
    result = talk(port, [b"GET /" + b"a" * MAX_HEAD_BYTES, b"a" * MAX_HEAD_BYTES], until_closed=True)
    assert result.answers[0].status == 414 and result.closed


def test_a_64_mib_header_does_not_stall_other_connections(front: tuple[ServerThread, HandlerForFrontTests]) -> None:
    """The probe: one connection sending a 64 MB header stalled a concurrent request for 5 s (the
    parser joins a header's pieces by concatenation, quadratic in its size). Refused at the limit,
    it is answered 431 while the sender is still sending, and the other request is answered then."""
    server, _ = front
    sending = threading.Event()
    done_sending = threading.Event()
    answered: list[bytes] = []

    def flood() -> None:
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            sock.sendall(b"GET /echo HTTP/1.1\r\nHost: x\r\nX-Big: ")
            sending.set()
            try:
                for _ in range(64 * 16):  # 64 MiB in 64 KiB writes
                    sock.sendall(b"z" * 65536)
                    if not answered:
                        readable, _, _ = select.select([sock], [], [], 0)
                        if readable:
                            answered.append(sock.recv(65536))
            except OSError:
                pass
            finally:
                done_sending.set()

    thread = threading.Thread(target=flood, daemon=True)
    thread.start()
    assert sending.wait(20)
    [other] = talk(server.port, GET).answers
    assert other.status == 200
    thread.join(120)
    assert answered and answered[0].startswith(b"HTTP/1.1 431 ")


def test_request_trailers_never_join_the_headers(port: int) -> None:
    """The probe found a trailer `Authorization:` merged into the request's headers (and so
    forwarded): trailers are read and dropped."""
    raw = (b"POST /headers HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTrailer: authorization\r\n\r\n"
           b"3\r\nabc\r\n0\r\nAuthorization: Bearer smuggled\r\nX-Late: 1\r\n\r\n")
    seen = seen_by_handler(port, raw)
    names = [name for name, _ in seen["headers"]]  # type: ignore[attr-defined]
    assert "authorization" not in names and "x-late" not in names and seen["body"] == "abc"


def test_a_query_string_is_not_part_of_the_path_even_when_the_target_is_no_url(port: int) -> None:
    seen = seen_by_handler(port, b"GET http://a:99999/headers?api_key=sk-secret HTTP/1.1\r\nHost: x\r\n\r\n")
    assert seen["path"] == "http://a:99999/headers" and "sk-secret" in str(seen["target"])


# ---- request smuggling: every ambiguous framing is refused -----------------------------------------

SMUGGLING = {
    "content-length-and-chunked": b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n"
                                  b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /x HTTP/1.1\r\n\r\n",
    "two-content-lengths": b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
    "content-length-list": b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1, 2\r\n\r\nab",
    "bad-chunk-size": b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
    "chunk-size-overflow": b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                           b"fffffffffffffffff1\r\nabc\r\n0\r\n\r\n",
    "chunked-not-last": b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n"
                        b"3\r\nabc\r\n0\r\n\r\n",
    "obs-fold": b"GET /echo HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n  folded\r\n\r\n",
    "space-before-colon": b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length : 3\r\n\r\nabc",
    "negative-length": b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
    "nul-in-header": b"GET /echo HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n",
}


@pytest.mark.parametrize("raw", list(SMUGGLING.values()), ids=list(SMUGGLING))
def test_an_ambiguous_framing_gets_400_and_nothing_reaches_the_handler(
        front: tuple[ServerThread, HandlerForFrontTests], raw: bytes) -> None:
    server, handler = front
    before = len(handler.seen)
    result = talk(server.port, raw, until_closed=True)
    assert result.answers[0].status == 400 and result.closed and result.raw.count(b"HTTP/1.1 ") == 1
    assert len(handler.seen) == before
