"""The proxy's Prometheus series (specd.proxy.metrics) as a scrape of the daemon's /metrics sees them: each
on the proxy's own registry, with the documented buckets, and label values from a fixed set."""

from __future__ import annotations

from prometheus_client import generate_latest

from specd.proxy.metrics import LATENCY_BUCKETS, ROUTES, ProxyMetrics, route_label

SERIES = ("specd_proxy_requests_total", "specd_proxy_request_seconds", "specd_proxy_ttft_seconds",
          "specd_proxy_hold_seconds", "specd_proxy_held", "specd_proxy_in_flight", "specd_proxy_retries_total")


def test_every_series_is_on_the_proxys_own_registry_and_two_proxies_do_not_collide() -> None:
    first, second = ProxyMetrics(), ProxyMetrics()  # two deployments' proxies in one daemon
    page = generate_latest(first.registry).decode()
    for name in SERIES:
        assert f"# TYPE {name} " in page, name
    assert first.registry is not second.registry


def test_the_histograms_use_the_documented_buckets() -> None:
    metrics = ProxyMetrics()
    metrics.latency.labels(endpoint="/v1/models").observe(0.004)
    metrics.ttft.observe(0.004)
    metrics.hold.observe(0.0005)
    value = metrics.registry.get_sample_value
    for bound in LATENCY_BUCKETS:
        assert value("specd_proxy_request_seconds_bucket", {"endpoint": "/v1/models", "le": str(bound)}) == 1.0
        assert value("specd_proxy_ttft_seconds_bucket", {"le": str(bound)}) == 1.0
    assert value("specd_proxy_hold_seconds_bucket", {"le": "0.001"}) == 1.0  # a hold of 0.5 ms is told apart


def test_a_path_outside_the_known_routes_is_labelled_other() -> None:
    assert [route_label(path) for path in ROUTES] == list(ROUTES)
    assert {route_label(path) for path in ("/v1/chat/completions/x", "/a/b/c", "/random-1", "")} == {"other"}
