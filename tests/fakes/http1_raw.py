"""Raw HTTP/1.1 on loopback sockets for the conformance tests: bytes in, parsed answers out.

`talk` writes exactly the bytes a test gives (malformed ones included) and reads the answers with
h11 — a parser independent of the httptools/llhttp one under test. `FakeScriptedBackend` is a FAKE
backend that answers each request path with bytes the test wrote by hand (the framings,
header forms and faults a real llama-server never sends on demand) and keeps every raw request
it read, so a test sees exactly what the proxy forwarded.
"""

from __future__ import annotations

import itertools
import socket
import socketserver
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import h11


@dataclass
class Answer:
    status: int
    headers: list[tuple[bytes, bytes]]  # names lowercased (h11 does)
    body: bytes = b""
    informational: list[int] = field(default_factory=list)

    def header(self, name: bytes) -> bytes | None:
        return next((v for k, v in self.headers if k == name), None)

    def has(self, name: bytes) -> bool:
        return self.header(name) is not None


@dataclass
class Talk:
    answers: list[Answer]
    closed: bool  # the server closed the connection
    raw: bytes  # every byte read


def parse_answers(raw: bytes, methods: list[str], closed: bool) -> list[Answer]:
    conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=1 << 24)
    conn.receive_data(raw)
    if closed:
        conn.receive_data(b"")
    answers: list[Answer] = []
    for method in methods:
        conn.send(h11.Request(method=method, target="/", headers=[("Host", "x"), ("Content-Length", "0")]))
        conn.send(h11.EndOfMessage())
        answer: Answer | None = None
        informational: list[int] = []
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError:
                return answers
            if event is h11.NEED_DATA or event is h11.PAUSED or isinstance(event, h11.ConnectionClosed):
                return answers
            if isinstance(event, h11.InformationalResponse):
                informational.append(event.status_code)
            elif isinstance(event, h11.Response):
                answer = Answer(event.status_code, list(event.headers), b"", informational)
            elif isinstance(event, h11.Data) and answer is not None:
                answer.body += bytes(event.data)
            elif isinstance(event, h11.EndOfMessage) and answer is not None:
                answers.append(answer)
                break
        if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
            break
        conn.start_next_cycle()
    return answers


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes its side (the socket's timeout fails one that never does)."""
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


def talk(port: int, raw: bytes | list[bytes], methods: list[str] | None = None, *, timeout_s: float = 20.0,
         until_closed: bool = False) -> Talk:
    """Send `raw` (a list: each part in its own write) and read until one answer per entry of
    `methods` (default: one GET) is in, or the server closes; `until_closed` reads to the close."""
    methods = methods if methods is not None else ["GET"]
    parts = raw if isinstance(raw, list) else [raw]
    received = b""
    closed = False
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        for part in parts:
            try:
                sock.sendall(part)
            except OSError:  # refused mid-send: what came back is the answer
                break
        while True:
            if not until_closed and len(parse_answers(received, methods, False)) >= len(methods):
                break
            try:
                chunk = sock.recv(1 << 20)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                closed = True
                break
            received += chunk
    return Talk(parse_answers(received, methods, closed), closed, received)


def hold_idle(port: int, count: int) -> list[socket.socket]:
    """`count` connections that connect and send nothing (the open-files probe's attack); the caller closes them."""
    held = []
    for _ in range(count):
        sock = socket.socket()
        sock.settimeout(30)
        sock.connect(("127.0.0.1", port))
        held.append(sock)
    return held


Script = bytes | Callable[[bytes], bytes]  # the answer's bytes, or made from the raw request


def read_head(sock: socket.socket, pending: bytes = b"") -> tuple[bytes, bytes] | None:
    """(a request's head without its blank line, the bytes read past it), reading from `sock` after
    `pending`; None when the peer closes first."""
    while b"\r\n\r\n" not in pending:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        pending += chunk
    head, _, rest = pending.partition(b"\r\n\r\n")
    return head, rest


class FakeScriptedBackend:
    """A FAKE backend on 127.0.0.1: each request's path picks a script (bytes to write back); a
    script ending with CLOSE closes the connection after writing. /health answers 200."""

    CLOSE = b"<close>"

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.scripts: dict[bytes, Script] = {}
        self.requests: list[bytes] = []  # every raw request, head and body, as read
        self.connection_of_request: list[int] = []  # for each of `requests`, the number of its connection
        self._connections = itertools.count(1)
        backend = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                backend._serve(self.request)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server((host, 0), Handler)
        self.port = int(self._server.server_address[1])
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _serve(self, sock: socket.socket) -> None:
        connection = next(self._connections)
        buffer = b""
        while True:
            read = read_head(sock, buffer)
            if read is None:
                return
            head, buffer = read
            length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")[1:]
                           if line.lower().startswith(b"content-length:")), 0)
            while len(buffer) < length:
                chunk = sock.recv(65536)
                if not chunk:
                    return
                buffer += chunk
            body, buffer = buffer[:length], buffer[length:]
            request = head + b"\r\n\r\n" + body
            path = head.split(b" ", 2)[1].split(b"?")[0]
            if path == b"/health":
                sock.sendall(b'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 15\r\n\r\n'
                             b'{"status":"ok"}')
                continue
            self.requests.append(request)
            self.connection_of_request.append(connection)
            script = self.scripts.get(path, b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
            answer = script(request) if callable(script) else script
            close = answer.endswith(self.CLOSE)
            sock.sendall(answer.removesuffix(self.CLOSE))
            if close:
                sock.shutdown(socket.SHUT_WR)
                return
