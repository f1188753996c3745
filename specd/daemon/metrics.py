"""Prometheus metrics for specd itself (not llama-server's: those stay on the backend's /metrics).

One `SpecdMetrics` per daemon, on its own registry, so tests can build several without the
global registry's duplicate-name errors and nothing of the library's default process collectors
is exported twice.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

CONTENT_TYPE = CONTENT_TYPE_LATEST

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
_HOLD_BUCKETS = (0.001, 0.01, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)



# Label values come from this fixed set, never from the client's path: a client that sends
# /v1/chat/completions?x=1, /a/b/c/... or random paths must not create new time series.
ROUTES = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models", "/completion", "/health",
          "/metrics", "/props", "/slots", "/tokenize", "/detokenize", "/infill", "/v1/rerank")


def route_label(path: str) -> str:
    """The route template a request path belongs to, or "other"."""
    return path if path in ROUTES else "other"

class SpecdMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.active_profile = Gauge(
            "specd_active_profile", "1 for the profile the unit runs now", ["unit", "profile"], registry=r
        )
        self.healthy = Gauge(
            "specd_backend_healthy", "1 when the last health check passed", ["unit"], registry=r
        )
        self.health_checks = Counter(
            "specd_health_checks_total", "Health checks by the daemon", ["unit", "result"], registry=r
        )
        self.switches = Counter("specd_switches_total", "Profile switches seen", ["unit"], registry=r)
        self.rollbacks = Counter("specd_rollbacks_total", "Rollbacks seen or made", ["unit"], registry=r)
        self.restarts = Counter(
            "specd_restarts_total", "Unit restarts made by the health monitor", ["unit"], registry=r
        )
        self.external_edits = Counter(
            "specd_external_edits_total", "Hand edits of the unit file recorded", ["unit"], registry=r
        )
        self.profile_errors = Gauge(
            "specd_invalid_profiles", "Profiles that fail validation now", ["unit"], registry=r
        )
        self.requests = Counter(
            "specd_proxy_requests_total", "Requests passed through the proxy", ["endpoint", "status"], registry=r
        )
        self.latency = Histogram(
            "specd_proxy_request_seconds", "Whole-request time through the proxy", ["endpoint"],
            buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.ttft = Histogram(
            "specd_proxy_ttft_seconds", "Time to the first streamed token", buckets=_LATENCY_BUCKETS, registry=r
        )
        self.hold = Histogram(
            "specd_proxy_hold_seconds", "Time a request waited for the backend to turn healthy",
            buckets=_HOLD_BUCKETS, registry=r,
        )
        self.held_now = Gauge("specd_proxy_held", "Requests waiting for the backend now", registry=r)
        self.in_flight = Gauge("specd_proxy_in_flight", "Requests being forwarded now", registry=r)
        self.retries = Counter(
            "specd_proxy_retries_total", "Requests re-sent after the backend refused or dropped them", registry=r
        )

    def add_unit(self, unit: str) -> None:
        """Export the unit's counters at 0 from the start: `increase()` and alerts on them need a series
        before the first switch, rollback or restart, not only after it."""
        for counter in (self.switches, self.rollbacks, self.restarts, self.external_edits):
            counter.labels(unit)
        for result in ("ok", "failed"):
            self.health_checks.labels(unit, result)
        self.profile_errors.labels(unit).set(0)

    def set_active_profile(self, unit: str, profile: str | None) -> None:
        for labels in list(self.active_profile._metrics):  # a one-hot gauge: clear the old profile
            if labels[0] == unit:
                self.active_profile.remove(*labels)
        if profile is not None:
            self.active_profile.labels(unit, profile).set(1)

    def render(self) -> bytes:
        return generate_latest(self.registry)
