"""Prometheus metrics for specd itself (not llama-server's: those stay on the backend's /metrics).

One `SpecdMetrics` per daemon, on its own registry, so tests can build several without the
global registry's duplicate-name errors and nothing of the library's default process collectors
is exported twice.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from specd.proxy.metrics import ProxyMetrics

CONTENT_TYPE = CONTENT_TYPE_LATEST


class SpecdMetrics(ProxyMetrics):
    """The daemon's series beside the proxy's (specd.proxy.metrics), on one registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        super().__init__(registry)
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
