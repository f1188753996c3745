"""Opt-in capture of chat-completion request bodies, for replaying real traffic in the tuner.

Bodies hold what users typed, so: off unless `[proxy] capture_bodies = true`, files 0600 in a
0700 directory, and bounded: two files (current and previous) of at most half the budget each.
Each body is one JSON line written with a single `write` on an O_APPEND descriptor, so a crash
leaves whole lines; headers (and so API keys) are never part of it. The proxy hands bodies over
with `submit`, as the bytes the client sent, and a writer thread writes them (specd.traffic.offpath):
a request never waits for the disk, and no body is parsed again: the line is the client's own
object, on one line, with the `specd` member added at its end; `close` writes what is pending.

A line is a workload line (specd.tune.workloads): the body, plus a `specd` object saying when the
proxy saw it (`recorded_at`, unix time) and how many requests were in flight then, itself included
(`concurrency`), so a replay keeps the recorded concurrency and order, not only the bodies.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specd.traffic.offpath import OffPathWriter

log = logging.getLogger(__name__)

CAPTURE_NAME = "chat-completions.jsonl"


class BodyCapture:
    def __init__(self, directory: Path, max_bytes: int, *, interval_s: float = 0.5) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.path = directory / CAPTURE_NAME
        self.previous = directory / f"{CAPTURE_NAME}.1"
        self.skipped = 0
        self._lock = threading.Lock()
        self._writer = _CaptureWriter(self, interval_s)
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(directory, 0o700)

    def submit(self, body: bytes | bytearray, *, in_flight: int = 0) -> None:
        """Hand a body (a JSON object, as the client sent it) to the writer thread (started on first
        use); the caller never waits. `in_flight`: the other requests in flight as it arrived."""
        if len(body) >= self.max_bytes // 2:  # could never fit a file: not even queued
            self.skipped += 1
            return
        self._writer.submit((bytes(body), in_flight, time.time()))

    def flush(self, timeout_s: float = 10.0) -> None:
        """Wait until every submitted body is written or skipped."""
        self._writer.flush(timeout_s)

    def close(self, timeout_s: float = 10.0) -> None:
        self._writer.close(timeout_s)

    def write(self, body: bytes | Mapping[str, Any], *, in_flight: int = 0, recorded_at: float | None = None) -> bool:
        """Append one body (a JSON object's bytes, or the object; `in_flight`: the other requests in
        flight as it arrived, at `recorded_at`, default now); False (and counted) when it alone is
        over the per-file budget or is no JSON object."""
        meta = {"recorded_at": round(time.time() if recorded_at is None else recorded_at, 3),
                "concurrency": in_flight + 1}
        line = workload_line(body if isinstance(body, bytes) else json.dumps(body).encode(), meta)
        if line is None:
            self.skipped += 1
            return False
        half = self.max_bytes // 2
        if len(line) > half:
            self.skipped += 1
            return False
        with self._lock:
            try:
                self._append(line, half)
            except OSError as exc:  # full disk, a symlink planted in its place: skip, never fail the request
                self.skipped += 1
                log.warning("cannot capture a request body in %s: %s", self.path, exc)
                return False
        return True

    def _append(self, line: bytes, half: int) -> None:
        try:
            size = self.path.lstat().st_size
        except FileNotFoundError:
            size = 0
        if size + len(line) > half:
            os.replace(self.path, self.previous)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            os.fchmod(fd, 0o600)  # the mode above applies only when the file is created
            os.write(fd, line)
        finally:
            os.close(fd)

    def read_all(self) -> list[dict[str, Any]]:
        """Captured bodies, oldest first."""
        bodies: list[dict[str, Any]] = []
        for path in (self.previous, self.path):
            if path.exists():
                for line in path.read_bytes().split(b"\n"):  # not splitlines: U+2028 may sit in a string
                    try:
                        if line:
                            bodies.append(json.loads(line))
                    except ValueError:
                        log.warning("skipping a damaged line in %s", path)
        return bodies


def workload_line(body: bytes, meta: dict[str, Any]) -> bytes | None:
    """The body's own JSON object on one line with `"specd": meta` as its last member; None when
    the body is no UTF-8 JSON object. JSON allows a raw line break only between tokens, never in a
    string, so line breaks become spaces and nothing else changes."""
    try:
        text = body.decode("utf-8").strip()
    except UnicodeDecodeError:
        return None
    if not (text.startswith("{") and text.endswith("}")):
        return None
    inside = text[1:-1].strip()
    members = (inside + "," if inside else "") + '"specd":' + json.dumps(meta, separators=(",", ":"))
    return ("{" + members.replace("\r", " ").replace("\n", " ") + "}\n").encode()


_Submitted = tuple[bytes, int, float]  # a body, the requests in flight beside it, when it came


class _CaptureWriter(OffPathWriter[_Submitted]):
    def __init__(self, capture: BodyCapture, interval_s: float) -> None:
        super().__init__("specd-capture-writer", max_pending=10_000, interval_s=interval_s)
        self._capture = capture
        self._started = False

    def submit(self, item: _Submitted) -> None:
        if not self._started:
            self._started = True
            self.start()
        super().submit(item)

    def _write_batch(self, batch: list[_Submitted]) -> int:
        return sum(self._capture.write(body, in_flight=in_flight, recorded_at=at) for body, in_flight, at in batch)
