"""Where a server listens, one definition: a TCP address and port, or a Unix domain socket.

llama-server listens on a Unix socket when its `--host` ends in `.sock` (server-http.cpp: AF_UNIX,
the port ignored); specd takes a host that is an absolute path ending in `.sock` as a socket, so the
socket's place does not hang on a working directory. Everything above passes an endpoint around as
its base URL string, as before: `http://HOST:PORT`, or `http+unix://socket/<the path, %-quoted>`
for a socket (the path quoted as one URL segment, so a request path appended to it stays apart and
its case survives, which a URL's host would not keep). `http_client` is the one place that makes a
client that speaks to both; a part that needs a TCP port (a second slot, the proxy's upstream, a
companion's port) asks `tcp_port`, which refuses a socket with a message saying what to do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

import httpx

from specd.errors import UsageError

SOCKET_SCHEME = "http+unix"
_SOCKET_PREFIX = f"{SOCKET_SCHEME}://socket/"
SOCKET_HTTP_HOST = "localhost"  # the Host header a request over a socket carries (llama-server ignores it)


def is_socket_host(host: str) -> bool:
    """Is `host` a Unix socket path, by llama-server's rule (a `.sock` ending), absolute as specd needs it?"""
    return host.startswith("/") and host.endswith(".sock")


def looks_like_socket(host: str) -> bool:
    """Would llama-server take `host` for a socket (it ends in `.sock`), absolute or not."""
    return host.endswith(".sock")


@dataclass(frozen=True)
class Endpoint:
    """A server's listening place: `socket` set (a path) or `host` and `port`."""

    host: str
    port: int | None = None

    @property
    def socket(self) -> str | None:
        return self.host if is_socket_host(self.host) else None

    @property
    def base_url(self) -> str:
        if self.socket is not None:
            return _SOCKET_PREFIX + quote(self.socket, safe="")
        host = f"[{self.host}]" if ":" in self.host and not self.host.startswith("[") else self.host
        return f"http://{host}:{self.port}"

    @property
    def shown(self) -> str:
        """For messages: `unix:/run/x.sock` (llama-server's log says `unix://...`) or `host:port`."""
        return f"unix:{self.socket}" if self.socket is not None else self.base_url.removeprefix("http://")


def socket_of(base_url: str) -> str | None:
    """The socket path of a base URL (or a request URL under it) made by Endpoint; None for TCP."""
    if not base_url.startswith(_SOCKET_PREFIX):
        return None
    return unquote(base_url[len(_SOCKET_PREFIX):].split("/", 1)[0])


def shown(base_url: str) -> str:
    """A base URL as a message names it."""
    socket = socket_of(base_url)
    return f"unix:{socket}" if socket is not None else base_url


def tcp_port(base_url: str, what: str) -> int:
    """The TCP port of `base_url`, for `what` (a part that needs one); a socket is refused, naming it."""
    socket = socket_of(base_url)
    if socket is not None:
        raise UsageError(f"the server listens on the Unix socket {socket}; {what} needs a TCP port, which a socket "
                         "has not; nothing was changed",
                         hint="use it with `specd switch --strategy restart`, or give the profile a TCP "
                              "host and port (host = \"127.0.0.1\", port = 8080) to use this")
    return int(base_url.rsplit(":", 1)[1])


class EndpointTransport(httpx.BaseTransport):
    """Sends a request under a socket base URL over that socket (as `http://localhost/...`), any other
    request over TCP as httpx does; one pooled transport per socket."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._tcp = httpx.HTTPTransport(**options)
        self._sockets: dict[str, httpx.HTTPTransport] = {}

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        socket = socket_of(str(request.url))
        if socket is None:
            return self._tcp.handle_request(request)
        transport = self._sockets.get(socket)
        if transport is None:
            transport = self._sockets[socket] = httpx.HTTPTransport(uds=socket, **self._options)
        rest = request.url.raw_path.split(b"/", 2)[2] if request.url.raw_path.count(b"/") >= 2 else b""
        request.url = httpx.URL(scheme="http", host=SOCKET_HTTP_HOST, raw_path=b"/" + rest)
        request.headers["Host"] = SOCKET_HTTP_HOST
        return transport.handle_request(request)

    def close(self) -> None:
        self._tcp.close()
        for transport in self._sockets.values():
            transport.close()


def http_client(timeout: httpx.Timeout | float, **options: Any) -> httpx.Client:
    """A client that reaches any Endpoint's base URL, TCP or socket (the caller closes it)."""
    limits = options.pop("limits", None)
    transport = EndpointTransport(**({"limits": limits} if limits is not None else {}))
    return httpx.Client(timeout=timeout, transport=transport, **options)
