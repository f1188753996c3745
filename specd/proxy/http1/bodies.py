"""Request bodies as they arrive, and the daemon-wide bound on the bytes held for clients.

A body is held from its first byte until its request is answered: the proxy may have to send it
again (specd.proxy.resend). Each connection bounds its own body (`max_body_bytes`, 413);
`HeldBytes` bounds the sum over every connection of every proxy in the daemon, which nothing did
before: ten uploads of 60 MB that never finished held 600 MB until their body timeout. Past the
bound a request is answered 503 with Retry-After and its connection closed: at once when its
Content-Length says it cannot fit now, else at the byte that would pass the bound (that body is
dropped and its bytes counted back).

A body grows in one buffer: its first part as it came, then a bytearray extended in place (glibc
moves a big block with mremap, not a copy), so holding N bytes costs about N, where gathering the
parts and joining them cost 2N at the join.
"""

from __future__ import annotations

from collections.abc import Callable

from specd.profiles.config import DEFAULT_HELD_BODY_BYTES

Body = bytes | bytearray
Refused = tuple[int, str, str]  # (status, message, error type) of the answer that refuses a body

DEFAULT_HELD_LIMIT = DEFAULT_HELD_BODY_BYTES


class HeldBytes:
    """The bytes of request bodies held for clients now, against one limit for the whole daemon.

    `on_release(size)` is told of every release (specd.proxy.heap gives memory back to the system
    after a burst)."""

    def __init__(self, limit: int = DEFAULT_HELD_LIMIT, on_release: Callable[[int], None] | None = None) -> None:
        self.limit = limit
        self.held = 0
        self.peak = 0
        self._on_release = on_release

    def fits(self, size: int) -> bool:
        return self.held + size <= self.limit

    def take(self, size: int) -> bool:
        """Count `size` more bytes as held; False (nothing counted) when that would pass the limit."""
        if not self.fits(size):
            return False
        self.held += size
        self.peak = max(self.peak, self.held)
        return True

    def release(self, size: int) -> None:
        if size:
            self.held -= size
            if self._on_release is not None:
                self._on_release(size)

    def refusal(self) -> Refused:
        message = f"the proxy holds its limit of {self.limit} bytes of request bodies for other clients; retry later"
        return 503, message, "unavailable_error"


class BodyBuffer:
    """One request's body while it arrives, counted in the daemon's `HeldBytes`."""

    def __init__(self, held: HeldBytes, max_bytes: int) -> None:
        self._held, self._max_bytes = held, max_bytes
        self._body: Body = b""
        self.size = 0

    def expect(self, declared: int) -> Refused | None:
        """The refusal a body of `declared` bytes (its Content-Length) meets before any of it is read."""
        if declared > self._max_bytes:
            return self._too_big()
        if not self._held.fits(declared):
            return self._held.refusal()
        return None

    def add(self, part: bytes) -> Refused | None:
        """Keep `part`; the refusal when it would pass a bound (the body so far is then dropped)."""
        if self.size + len(part) > self._max_bytes:
            self.drop()
            return self._too_big()
        if not self._held.take(len(part)):
            self.drop()
            return self._held.refusal()
        self.size += len(part)
        if not self._body:
            self._body = part
        elif isinstance(self._body, bytes):
            self._body = bytearray(self._body)
            self._body += part
        else:
            self._body += part
        return None

    def take(self) -> tuple[Body, int]:
        """The whole body and the bytes it holds: from now on the caller releases them."""
        whole, size = self._body, self.size
        self._body, self.size = b"", 0
        return whole, size

    def drop(self) -> None:
        """Forget the body so far and count its bytes back."""
        size = self.size
        self._body, self.size = b"", 0
        self._held.release(size)

    def _too_big(self) -> Refused:
        return 413, f"request body over {self._max_bytes} bytes", "invalid_request_error"
