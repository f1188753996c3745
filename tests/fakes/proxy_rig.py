"""The proxy rig the proxy's tests share: a FAKE backend (FakeBackendForProxyTests) and the real
proxy in front of it, each in its own server thread on loopback, with a real traffic recorder.

One definition for tests/unit/test_proxy.py and test_proxy_faults.py: the rig was once copied
between them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specd.proxy.metrics import ProxyMetrics
from specd.proxy.proxy import Backend, Proxy, ProxySettings
from specd.traffic.capture import BodyCapture
from specd.traffic.records import Recorder, TrafficRecord, fetch_records, open_db
from tests.fakes.proxy_fakes import FakeBackendForProxyTests, ServerThread, free_port


class ProxyRig:
    """`settings` go to ProxySettings (health_poll_s 0.05 and unit "t" unless given)."""

    def __init__(self, tmp_path: Path, *, capture: BodyCapture | None = None, metrics: ProxyMetrics | None = None,
                 tokens: int = 8, token_delay_s: float = 0.0, **settings: Any) -> None:
        self.fake = FakeBackendForProxyTests(tokens=tokens, token_delay_s=token_delay_s)
        self.backend = ServerThread(self.fake.app, free_port()).start()
        self.db = tmp_path / "state.db"
        self.recorder = Recorder(self.db)
        self.metrics = metrics
        self.proxy = Proxy(ProxySettings(**{"health_poll_s": 0.05, "unit": "t", **settings}),
                           lambda: Backend(self.backend.url, "plain"), recorder=self.recorder, metrics=metrics,
                           capture=capture)
        self.front = ServerThread(self.proxy, free_port()).start()

    @property
    def url(self) -> str:
        return self.front.url

    @property
    def chat_url(self) -> str:
        return f"{self.front.url}/v1/chat/completions"

    def records(self) -> list[TrafficRecord]:
        self.recorder.flush()
        conn = open_db(self.db)
        try:
            return list(fetch_records(conn, 0))
        finally:
            conn.close()

    def settled(self) -> bool:
        """Nothing held, nothing talking to the backend."""
        return self.proxy.in_flight == 0 and self.proxy.active == 0

    def close(self) -> None:
        self.front.stop()
        self.backend.stop()
        self.recorder.close()
