"""The proxy's Prometheus series: requests by route and status, latency, TTFT, holds, re-sends.

The daemon's own series (specd.daemon.metrics.SpecdMetrics) extend these on the same registry, so
one /metrics page shows both; the proxy sees only its own.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
_HOLD_BUCKETS = (0.001, 0.01, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)

# Label values come from this fixed set, never from the client's path: a client that sends
# /v1/chat/completions?x=1, /a/b/c/... or random paths must not create new time series.
ROUTES = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models", "/completion", "/health",
          "/metrics", "/props", "/slots", "/tokenize", "/detokenize", "/infill", "/v1/rerank")


def route_label(path: str) -> str:
    """The route template a request path belongs to, or "other"."""
    return path if path in ROUTES else "other"


class ProxyMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "specd_proxy_requests_total", "Requests passed through the proxy", ["endpoint", "status"], registry=r
        )
        self.latency = Histogram(
            "specd_proxy_request_seconds", "Whole-request time through the proxy", ["endpoint"],
            buckets=LATENCY_BUCKETS, registry=r,
        )
        self.ttft = Histogram(
            "specd_proxy_ttft_seconds", "Time to the first streamed token", buckets=LATENCY_BUCKETS, registry=r
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
