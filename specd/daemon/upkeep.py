"""The daemon's periodic chores that are not about health: sampling llama-server's counters when
no proxy records traffic, and keeping the state directory bounded (traffic rows, generations,
unit backups). Each runs in the scheduler's thread with its own SQLite connection."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, MutableMapping
from typing import Any

import httpx

from specd.daemon.steering import NO_BACKEND, backend_of
from specd.deploy.history import History
from specd.deploy.unitfiles import prune_backups
from specd.errors import HealthError
from specd.paths import StateDir
from specd.profiles.config import Deployment
from specd.traffic import records as traffic

log = logging.getLogger("specd.daemon.app")

SAMPLE_INTERVAL_S = 60.0
TRAFFIC_KEEP_S = 30 * 86400
HISTORY_KEEP = 500


def sample_counters(http: httpx.Client, state: StateDir, deployment: Deployment,
                    info: MutableMapping[str, Any]) -> None:
    """One sample of the serving llama-server's /metrics counters into the traffic table.
    `info` remembers that a missing source was already logged (once per daemon run)."""
    backend = backend_of(deployment, state)
    if backend is NO_BACKEND:
        return
    try:
        counters = traffic.sample_metrics(http, backend.url)
    except HealthError as exc:
        if not info.get("sampling_warned"):
            log.info("%s: no traffic source: %s", deployment.unit, exc)
            info["sampling_warned"] = True
        return
    conn = traffic.open_db(state.db)
    try:
        traffic.record_sample(conn, counters, unit=deployment.unit, profile=backend.profile)
    finally:
        conn.close()


def housekeeping(state: StateDir, deployments: Iterable[Deployment]) -> None:
    """Drop traffic rows older than 30 days, generations past the newest 500, backups past `backups_keep`."""
    conn = traffic.open_db(state.db)
    try:
        removed = traffic.prune(conn, time.time() - TRAFFIC_KEEP_S)
    finally:
        conn.close()
    history = History(state.db)  # this thread's own connection
    try:
        for deployment in deployments:
            backups = prune_backups(deployment.unit_path, deployment.backups_keep)
            generations = history.prune(deployment.unit, HISTORY_KEEP)
            if backups or generations or removed:
                log.info("%s: housekeeping removed %d backups, %d generations, %d traffic rows",
                         deployment.unit, len(backups), generations, removed)
    finally:
        history.close()
