"""Traffic rows and captured bodies are written off the request path, and none is lost at shutdown.

The proxy answers without waiting for SQLite or the capture file (their writer threads do that,
specd.traffic.offpath); what they hold when the daemon stops is written before it exits.
"""

from __future__ import annotations

import threading
from pathlib import Path

import httpx

from specd.proxy.proxy import Backend, Proxy, ProxySettings
from specd.traffic.capture import BodyCapture
from specd.traffic.offpath import OffPathWriter
from specd.traffic.records import Recorder, fetch_records, open_db
from tests.fakes.proxy_fakes import FakeBackendForProxyTests, ServerThread, chat_body, free_port, read_stream

NEVER_S = 3600.0  # a writer that would write only when closed


def rows(db: Path) -> list[object]:
    conn = open_db(db)
    try:
        return list(fetch_records(conn, 0))
    finally:
        conn.close()


def test_answers_never_wait_for_the_writers_and_closing_them_loses_nothing(tmp_path: Path) -> None:
    fake = FakeBackendForProxyTests(tokens=4)
    backend = ServerThread(fake.app, free_port()).start()
    db = tmp_path / "state.db"
    recorder = Recorder(db, interval_s=NEVER_S)
    capture = BodyCapture(tmp_path / "capture", 1 << 20, interval_s=NEVER_S)
    proxy = Proxy(ProxySettings(unit="t"), lambda: Backend(backend.url, "plain"), recorder=recorder, capture=capture)
    front = ServerThread(proxy, free_port()).start()
    try:
        with httpx.Client(timeout=30) as client:
            for index in range(20):
                if index % 2:
                    assert read_stream(client, f"{front.url}/v1/chat/completions",
                                       chat_body(f"q{index}", stream=True))[-1] == "[DONE]"
                else:
                    answer = client.post(f"{front.url}/v1/chat/completions", json=chat_body(f"q{index}"))
                    assert answer.status_code == 200
        # every client has its answer, and nothing is on disk yet: no request waited for a write
        assert rows(db) == [] and capture.read_all() == []
        assert recorder.submitted == 20
    finally:
        front.stop()  # the proxy's shutdown closes the capture: its pending bodies are written
        backend.stop()
        recorder.close()  # as the daemon does last at shutdown
    written = rows(db)
    assert len(written) == 20 and all(r.status == 200 for r in written)  # type: ignore[attr-defined]
    assert sorted(b["messages"][0]["content"] for b in capture.read_all()) == sorted(f"q{i}" for i in range(20))


class FlakyWriterForTests(OffPathWriter[int]):
    """A FAKE sink: fails every batch that holds a negative item."""

    def __init__(self) -> None:
        super().__init__("test-writer", max_pending=5, interval_s=NEVER_S)
        self.kept: list[int] = []
        self.thread_names: set[str] = set()
        self.start()

    def _write_batch(self, batch: list[int]) -> int:
        self.thread_names.add(threading.current_thread().name)
        if any(item < 0 for item in batch):
            raise OSError("disk full")
        self.kept.extend(batch)
        return len(batch)


def test_a_failed_batch_is_counted_dropped_and_an_overflow_is_refused_not_queued() -> None:
    writer = FlakyWriterForTests()
    for item in range(7):  # two past max_pending: refused at once
        writer.submit(item)
    writer.close()
    assert writer.kept == [0, 1, 2, 3, 4] and (writer.written, writer.dropped, writer.submitted) == (5, 2, 7)
    assert writer.thread_names == {"test-writer"}  # written in the writer's thread, not the caller's
    failing = FlakyWriterForTests()
    failing.submit(-1)
    failing.close()
    assert failing.kept == [] and (failing.written, failing.dropped) == (0, 1)
