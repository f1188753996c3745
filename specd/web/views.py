"""What the page shows of each deployment, and its timeline of generations and decisions.

Plain functions over the state DB, the unit files and the daemon's own report; each call opens
its own connections (the page's requests run in worker threads). Nothing here changes anything.
"""

from __future__ import annotations

import difflib
import socket
import time
from typing import Any

import httpx

from specd import context
from specd.deploy.history import Generation, History, split_numbers
from specd.deploy.status import collect_status
from specd.deploy.switch import JOURNAL_EVENT
from specd.deploy.unitfiles import ContentStore
from specd.errors import SpecdError
from specd.profiles.config import Config, Deployment
from specd.profiles.load import list_profiles
from specd.routing.state import read_state
from specd.traffic import records as traffic
from specd.tune.pins import get_pin, period_pins

TTFT_WINDOW_S = 15 * 60.0
DIFF_MAX_LINES = 200
TIMELINE_LIMIT = 60


def ttft_now(unit: str, window_s: float = TTFT_WINDOW_S) -> dict[str, Any]:
    """Median and p95 time to first token of the streamed requests of the last minutes."""
    conn = traffic.open_db(context.state_dir().db)
    try:
        records = traffic.fetch_records(conn, time.time() - window_s, unit)
    finally:
        conn.close()
    ttfts = [r.ttft_ms for r in records if r.ttft_ms is not None and 200 <= r.status < 300]
    return {"p50_ms": traffic.percentile(ttfts, 0.5), "p95_ms": traffic.percentile(ttfts, 0.95),
            "requests": len(ttfts), "window_s": window_s}


def _generation_summary(generation: Generation | None) -> dict[str, Any] | None:
    if generation is None:
        return None
    return {"id": generation.id, "at": generation.created_at, "kind": generation.kind,
            "profile": generation.profile, "outcome": generation.outcome, "detail": generation.detail,
            "health_s": generation.health_s, "total_s": generation.total_s, "trigger": generation.trigger}


def profile_listing(deployment: Deployment) -> list[dict[str, Any]]:
    """The switchable profiles; re-read only when a file in the directory changed (parsing every
    profile costs more than the rest of the page)."""
    try:
        stamp = tuple(sorted((p.name, p.stat().st_mtime_ns) for p in deployment.profiles_dir.glob("*.toml")))
    except OSError:
        stamp = ()
    cached = _LISTINGS.get(deployment.unit)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    listing = [{"name": p.name, "description": p.description, "error": p.error}
               for p in list_profiles(deployment.profiles_dir) if not p.abstract]
    _LISTINGS[deployment.unit] = (stamp, listing)
    return listing


_LISTINGS: dict[str, tuple[tuple[tuple[str, int], ...], list[dict[str, Any]]]] = {}


def deployment_view(config: Config, deployment: Deployment, daemon: dict[str, Any],
                    client: httpx.Client | None = None) -> dict[str, Any]:
    """One deployment's card: profile, unit state, health (last gate, live probe, TTFT now), pin."""
    unit = deployment.unit
    own = (daemon.get("units") or {}).get(unit, {})
    seams = context.seams_for(deployment)
    try:
        status = collect_status(seams, {}, client=client).as_dict()
    finally:
        seams.close()
    status.pop("daemon", None)
    history = History(context.state_dir().db)
    try:
        newest = next(iter(history.list(unit, limit=1)), None)
    finally:
        history.close()
    pin = get_pin(unit)
    return {
        **status,
        "last_gate": _generation_summary(newest),
        "monitor": own.get("health"),
        "proxy": own.get("proxy"),
        "profile_errors": own.get("profile_errors") or {},
        "ttft_now": ttft_now(unit),
        "pin": None if pin is None else {"profile": pin.profile, "at": pin.at},
        "schedule": {period: p.profile for period, p in period_pins(unit).items()},
        "profiles": profile_listing(deployment),
        "routing": routing_view(unit),
    }


def routing_view(unit: str) -> dict[str, Any]:
    """Routing on the card: on or off, how, which companions, and each class's profile with the reason."""
    routing = read_state(context.state_dir(), unit)
    table = routing.table
    return {"on": routing.on, "mode": routing.mode, "residents": [r.profile for r in routing.residents],
            "routes": [{"class": c, "profile": r.profile, "reason": r.reason} for c, r in table.routes.items()],
            "source": table.source, "learned_at": table.learned_at or None, "note": routing.note,
            "probe": None if routing.probe is None else routing.probe.get("verdict")}


def page_state(config: Config, deployments: list[Deployment], daemon: dict[str, Any],
               client: httpx.Client | None = None) -> dict[str, Any]:
    return {
        "host": socket.gethostname(),
        "daemon": {k: daemon.get(k) for k in ("running", "pid", "started_at", "heartbeat_at", "next_tuning")},
        "tuner": {"enabled": config.tuner.enabled, "cron": config.tuner.cron, "margin": config.tuner.margin},
        "deployments": [deployment_view(config, d, daemon, client) for d in deployments],
        "at": time.time(),
    }


# ---- the timeline --------------------------------------------------------------------------------------


def unit_diff(store: ContentStore, before_sha: str | None, after_sha: str | None, *, before: str, after: str
              ) -> str | None:
    """The unified diff between two stored unit texts; None when either is not stored."""
    new = store.get(after_sha) if after_sha else None
    if new is None:
        return None
    old = (store.get(before_sha) if before_sha else None) or ""
    lines = list(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                      fromfile=before, tofile=after))
    if len(lines) > DIFF_MAX_LINES:
        lines = [*lines[:DIFF_MAX_LINES], f"... {len(lines) - DIFF_MAX_LINES} more lines\n"]
    return "".join(lines) or "(no change to the unit text)"


def _generation_entry(history: History, store: ContentStore, generation: Generation,
                      journals: dict[int, str]) -> dict[str, Any]:
    previous = history.get(generation.previous_id) if generation.previous_id is not None else None
    label = "auto-revert" if generation.outcome == "reverted" else generation.kind
    return {
        "type": "generation", "id": generation.id, "at": generation.created_at, "kind": label,
        "profile": generation.profile, "trigger": generation.trigger, "outcome": generation.outcome,
        "detail": generation.detail, "total_s": generation.total_s, "health_s": generation.health_s,
        "previous": None if previous is None else {"id": previous.id, "profile": previous.profile},
        "diff": unit_diff(store, previous.unit_sha256 if previous else None, generation.unit_sha256,
                          before=f"generation {previous.id} ({previous.profile})" if previous else "(none)",
                          after=f"generation {generation.id} ({generation.profile})"),
        "journal": journals.get(generation.id),
    }


def timeline(deployment: Deployment, limit: int = TIMELINE_LIMIT) -> list[dict[str, Any]]:
    """Generations (with their unit diffs and, for reverts, the journal) and daemon/tuner events,
    newest first."""
    unit = deployment.unit
    state = context.state_dir()
    store = ContentStore(state.unit_store(deployment.name))
    history = History(state.db)
    try:
        events = [dict(row) for row in history.events(unit, limit * 2)]
        journals: dict[int, str] = {}
        for event in events:
            if event["kind"] == JOURNAL_EVENT:
                first, _, lines = str(event["detail"]).partition("\n")
                number = first.removeprefix("generation ").strip()
                if number.isdigit():
                    journals.setdefault(int(number), lines)
        entries = [_generation_entry(history, store, g, journals) for g in history.list(unit, limit)]
    except SpecdError as exc:
        return [{"type": "error", "at": "", "kind": "error", "detail": exc.message}]
    finally:
        history.close()
    for event in events:
        if event["kind"] == JOURNAL_EVENT:
            continue
        entry: dict[str, Any] = {"type": "event", "id": event["id"], "at": event["at"], "kind": event["kind"],
                                 "detail": event["detail"]}
        if str(event["kind"]).startswith("tune"):
            entry["detail"], entry["numbers"] = split_numbers(str(event["detail"]))
        entries.append(entry)
    entries.sort(key=lambda e: str(e["at"]), reverse=True)
    return entries[:limit]
