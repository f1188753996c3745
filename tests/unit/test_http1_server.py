"""The proxy's HTTP/1.1 server (specd.proxy.http1) over real sockets on loopback, with a small
handler instead of the proxy: what any HTTP client relies on, checked byte by byte."""

from __future__ import annotations

import json
import logging
import select
import socket
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from specd.proxy.http1.server import FrontLimits
from tests.fakes.front_handler import HandlerForFrontTests
from tests.fakes.http1_raw import read_until_closed, talk
from tests.fakes.proxy_fakes import ServerThread, eventually, free_port


@pytest.fixture
def front() -> Iterator[tuple[ServerThread, HandlerForFrontTests]]:
    handler = HandlerForFrontTests()
    running = ServerThread(handler, free_port()).start()
    yield running, handler
    running.stop()


def connect(server: ServerThread) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=10)



def test_a_whole_answer_leaves_in_one_write_with_its_length(front: tuple[ServerThread, Any]) -> None:
    server, _ = front
    with connect(server) as sock:
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
        first = sock.recv(65536)
    assert first.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"\r\ncontent-length: 5\r\n" in first and first.endswith(b"\r\n\r\nhello")


def test_headers_go_out_at_once_when_no_body_part_is_ready(front: tuple[ServerThread, Any]) -> None:
    """A stream's status line must not wait for its first token (a client's TTFT would include it):
    the head arrives while the handler still holds its first part back."""
    server, handler = front
    with connect(server) as sock:
        sock.sendall(b"GET /late HTTP/1.1\r\nHost: x\r\n\r\n")
        first = sock.recv(65536)
        assert not handler.release.done()
        assert first.startswith(b"HTTP/1.1 200 OK\r\n") and first.endswith(b"\r\n\r\n")
        handler.release.set_result(None)
        rest = b""
        while not rest.endswith(b"0\r\n\r\n"):
            rest += sock.recv(65536)
    assert rest == b"9\r\nlate part\r\n0\r\n\r\n"


def test_a_stream_is_chunked_and_its_parts_arrive_in_order(front: tuple[ServerThread, Any]) -> None:
    server, _ = front
    with httpx.Client(timeout=10) as client, client.stream("GET", f"{server.url}/stream?n=50") as response:
        assert response.headers["transfer-encoding"] == "chunked"
        body = b"".join(response.iter_raw())
    assert body == b"".join(b"data: %d\n\n" % index for index in range(50))


def test_pipelined_requests_are_answered_in_order(front: tuple[ServerThread, Any]) -> None:
    server, handler = front
    handler.release.set_result(None)
    with connect(server) as sock:
        sock.sendall(b"GET /late HTTP/1.1\r\nHost: x\r\n\r\n"
                     b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\n\r\nsecond"
                     b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: close\r\n\r\nthird")
        received = read_until_closed(sock)
    assert received.count(b"HTTP/1.1 200 OK") == 3
    assert received.index(b"late part") < received.index(b"second") < received.index(b"third")
    assert [r.path for r in handler.seen] == ["/late", "/echo", "/echo"]


def test_expect_100_continue_is_answered_before_the_body(front: tuple[ServerThread, Any]) -> None:
    server, _ = front
    with connect(server) as sock:
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
        assert sock.recv(65536) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(b"body")
        answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 200 OK") and answer.endswith(b"body")


def test_a_chunked_request_body_reaches_the_handler_whole(front: tuple[ServerThread, Any]) -> None:
    server, handler = front
    with connect(server) as sock:
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                     b"3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n")
        answer = read_until_closed(sock)
    assert answer.endswith(b"\r\n\r\nabcdefg") and handler.seen[0].body == b"abcdefg"


def test_a_malformed_request_gets_400_and_the_connection_closes(front: tuple[ServerThread, Any]) -> None:
    server, handler = front
    with connect(server) as sock:
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab")
        answer = read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 400 ") and b"malformed" in answer and handler.seen == []


def test_an_http_1_0_client_gets_a_stream_ended_by_closing(front: tuple[ServerThread, Any]) -> None:
    server, _ = front
    with connect(server) as sock:
        sock.sendall(b"GET /stream?n=3 HTTP/1.0\r\n\r\n")
        answer = read_until_closed(sock)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"transfer-encoding" not in head and b"connection: close" in head
    assert body == b"data: 0\n\ndata: 1\n\ndata: 2\n\n"


def test_a_target_that_is_no_url_reaches_the_handler_as_it_was_sent(front: tuple[ServerThread, Any]) -> None:
    server, handler = front
    with connect(server) as sock:
        sock.sendall(b"GET http://a:99999/x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answer = read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 404 ") and handler.seen[0].path == "http://a:99999/x"


def test_a_head_request_gets_headers_only(front: tuple[ServerThread, Any]) -> None:
    server, _ = front
    with connect(server) as sock:
        sock.sendall(b"HEAD /stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answer = read_until_closed(sock)
    head, separator, rest = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK") and separator and rest == b""  # not even a last chunk


def test_the_handler_hears_of_a_client_that_leaves(front: tuple[ServerThread, Any]) -> None:
    server, handler = front
    with connect(server) as sock:
        sock.sendall(b"GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")
        eventually(lambda: handler.seen, "the request to reach the handler")
    assert handler.left.wait(10)


def test_a_client_that_does_not_read_pauses_the_producer(front: tuple[ServerThread, Any]) -> None:
    server, handler = front
    with connect(server) as sock:
        sock.sendall(b"GET /slow-reader HTTP/1.1\r\nHost: x\r\n\r\n")
        eventually(lambda: handler.paused >= 1, "the producer to be paused")
        received = 0
        while handler.resumed == 0:  # reading lets it go on
            received += len(sock.recv(1 << 20))
    assert 0 < received < 64 << 20  # paused long before the 256 MiB it would have written


def test_a_second_answer_on_the_connection_is_not_paused_by_the_first_ones_slow_reader(
        front: tuple[ServerThread, Any]) -> None:
    """Once the client caught up, the connection's pause is over: the next answer on it flows (a pause
    flag left set would pause it at once, with nothing to resume it)."""
    server, handler = front
    with connect(server) as sock:
        for answer in (1, 2):
            sock.sendall(b"GET /throttled HTTP/1.1\r\nHost: x\r\n\r\n")
            if answer == 1:
                eventually(lambda: handler.paused >= 1, "the first answer to be paused by the unread socket")
            received = b""
            while not received.endswith(b"0\r\n\r\n"):
                chunk = sock.recv(1 << 20)
                assert chunk, "closed before the end of the answer"
                received += chunk
            assert received.count(b"x" * 1024) >= 512 * 64  # all 32 MiB came
    assert handler.resumed >= 1


def test_a_client_still_sending_a_refused_body_reads_its_413_not_a_reset(front: tuple[ServerThread, Any]) -> None:
    """Most clients write the whole body before they read. The 413 goes out when the headers declare
    too much; the body that follows must not turn the connection into a reset that destroys it."""
    server, handler = front
    with connect(server) as sock:
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2097152\r\n\r\n")
        assert select.select([sock], [], [], 10)[0], "no answer to the headers"  # the 413 is here, unread
        sock.sendall(b"x" * 262144)
        sock.shutdown(socket.SHUT_WR)
        answer = read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 413 ") and answer.endswith(b"}") and handler.seen == []


def test_a_refused_request_right_after_an_answer_gets_its_413_in_turn(front: tuple[ServerThread, Any]) -> None:
    """A client sends its next request once it has the answer, and the handler of the one before
    may still be finishing up (on a loaded box it often is): a refused request then waits its turn,
    it does not close the connection with no answer at all."""
    server, handler = front
    with connect(server) as sock:
        sock.sendall(b"GET /answer-then-finish-late HTTP/1.1\r\nHost: x\r\n\r\n")
        first = b""
        while not first.endswith(b"done"):
            first += sock.recv(65536)
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2097152\r\n\r\n")
        if select.select([sock], [], [], 0.5)[0]:  # the server has acted on it before the handler ended
            refused = sock.recv(65536)
            assert refused.startswith(b"HTTP/1.1 413 "), "closed with no answer"
        else:
            handler.finish.set_result(None)
            refused = read_until_closed(sock)  # then the server shuts its side
        assert refused.startswith(b"HTTP/1.1 413 ") and b"request body over" in refused
    if not handler.finish.done():  # let the first handler end before the server stops
        handler.finish.set_result(None)
    assert first.startswith(b"HTTP/1.1 200 ") and [r.path for r in handler.seen] == ["/answer-then-finish-late"]


def test_a_stopping_server_closes_idle_connections_at_once_and_lets_an_answer_in_progress_finish(
        front: tuple[ServerThread, Any]) -> None:
    server, handler = front
    with connect(server) as idle, connect(server) as busy:
        idle.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi")
        assert idle.recv(65536).endswith(b"\r\n\r\nhi")  # answered; the connection stays open, idle
        busy.sendall(b"GET /late HTTP/1.1\r\nHost: x\r\n\r\n")
        head = b""
        while b"\r\n\r\n" not in head:
            head += busy.recv(65536)
        stopping = threading.Thread(target=server.stop)
        stopping.start()
        assert idle.recv(65536) == b""  # closed at once, before the busy answer ended
        handler.release.set_result(None)
        rest = read_until_closed(busy)
    stopping.join(15)
    assert (head + rest).endswith(b"9\r\nlate part\r\n0\r\n\r\n")  # finished within the grace, then closed


def test_a_server_with_no_connection_left_stops_at_once_not_at_the_end_of_its_grace() -> None:
    running = ServerThread(HandlerForFrontTests(), free_port(), grace_s=600).start()
    with connect(running) as sock:
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi")
        assert sock.recv(65536).endswith(b"hi")
    thread = running.thread
    running.stop()  # joins for 15 s at most
    assert thread is not None and not thread.is_alive()


def test_a_handler_that_raises_answers_500_logs_the_error_and_keeps_the_connection(
        front: tuple[ServerThread, Any], caplog: pytest.LogCaptureFixture) -> None:
    server, _ = front
    with caplog.at_level(logging.ERROR, logger="specd"):
        result = talk(server.port, b"GET /raise HTTP/1.1\r\nHost: x\r\n\r\n"
                                   b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nok", ["GET", "POST"])
    failed, after = result.answers
    assert failed.status == 500 and json.loads(failed.body)["error"] == {
        "message": "specd proxy error", "type": "api_error", "code": 500}
    assert after.status == 200 and after.body == b"ok"
    [logged] = caplog.records
    assert logged.getMessage() == "proxy error" and logged.exc_info is not None
    assert str(logged.exc_info[1]) == "a bug in the handler"


def test_a_stream_its_handler_breaks_off_ends_with_the_connection_not_a_clean_last_chunk(
        front: tuple[ServerThread, Any]) -> None:
    """A cut answer must look cut: only closing the connection says so (no last chunk, no next answer on it)."""
    server, _ = front
    with connect(server) as sock:
        sock.sendall(b"GET /raise-mid-stream HTTP/1.1\r\nHost: x\r\n\r\n" + b"GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
        received = read_until_closed(sock)
    assert received.startswith(b"HTTP/1.1 200 OK\r\n") and b"data: 0" in received
    assert not received.endswith(b"0\r\n\r\n") and received.count(b"HTTP/1.1 ") == 1



def test_every_body_s_bytes_are_given_back_once_answered(front: tuple[ServerThread, Any]) -> None:
    """The daemon-wide budget of request bytes held for clients (FrontLimits.held) returns to 0."""
    server, _ = front
    result = talk(server.port, b"".join(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nbody%d" % n
                                        for n in range(3)), ["POST"] * 3)
    assert [a.body for a in result.answers] == [b"body0", b"body1", b"body2"]
    assert server.server is not None
    eventually(lambda: server.call(lambda: server.server._limits.held.held) == 0, "the held bytes to be given back")
    assert server.call(lambda: server.server._limits.held.held) == 0


def test_a_handler_that_fails_before_its_task_answers_500_and_closes_the_connection(
        front: tuple[ServerThread, Any], caplog: pytest.LogCaptureFixture) -> None:
    server, _ = front
    with caplog.at_level(logging.ERROR, logger="specd"):
        result = talk(server.port, b"GET /raise-at-once HTTP/1.1\r\nHost: x\r\n\r\n", until_closed=True)
    [failed] = result.answers
    assert failed.status == 500 and json.loads(failed.body)["error"] == {
        "message": "specd proxy error", "type": "api_error", "code": 500}
    assert result.closed and failed.header(b"connection") == b"close"
    assert [r.getMessage() for r in caplog.records] == ["proxy error"]
    eventually(lambda: server.call(lambda: server.server._limits.held.held) == 0, "the held bytes to be given back")


def test_a_handler_cancelled_before_it_answered_gets_the_client_a_500_and_the_connection_goes_on(
        front: tuple[ServerThread, Any], caplog: pytest.LogCaptureFixture) -> None:
    """However a handler's task ends, the client gets an answer: a cancelled one (no exception to report)
    is a 500 like a bug, and the request pipelined behind it is answered on the same connection."""
    server, _ = front
    with caplog.at_level(logging.ERROR):
        result = talk(server.port, b"GET /cancelled HTTP/1.1\r\nHost: x\r\n\r\n"
                                   b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nok", ["GET", "POST"],
                      timeout_s=10)
    failed, after = result.answers
    assert failed.status == 500 and json.loads(failed.body)["error"]["type"] == "api_error"
    assert after.status == 200 and after.body == b"ok" and not result.closed
    assert [r.getMessage() for r in caplog.records] == []  # a cancel is no bug: nothing for the journal


def test_a_big_whole_answer_to_a_slow_reader_after_a_stream_arrives_whole_and_logs_no_error(
        caplog: pytest.LogCaptureFixture) -> None:
    """A whole answer bigger than the socket buffers (8 MiB, above Linux's default tcp_wmem maximum) pauses the
    connection's writing until the client reads. After a streamed answer on the same connection (its producer
    was the one a pause stopped) that pause must find nothing left of the stream: the answer arrives whole and
    neither the server nor asyncio logs an error."""
    handler = HandlerForFrontTests(FrontLimits(max_body_bytes=16 << 20, body_timeout_s=10.0, header_timeout_s=10.0))
    server = ServerThread(handler, free_port()).start()
    body = bytes(range(256)) * (8 << 12)
    try:
        with caplog.at_level(logging.ERROR), connect(server) as sock:
            sock.sendall(b"GET /stream?n=3 HTTP/1.1\r\nHost: x\r\n\r\n")
            streamed = b""
            while not streamed.endswith(b"0\r\n\r\n"):
                streamed += sock.recv(65536)
            sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%b"
                         % (len(body), body))
            received = read_until_closed(sock)
    finally:
        server.stop()
    head, _, echoed = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and echoed == body
    assert [r.getMessage() for r in caplog.records] == []
