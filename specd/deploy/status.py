"""What `specd status` reports, gathered from the unit file, systemd, the endpoint and the daemon."""

from __future__ import annotations

from typing import Any

import httpx

from specd.deploy.health import check_once
from specd.deploy.history import History
from specd.deploy.systemd import connect_systemd
from specd.deploy.unitfiles import read_text
from specd.errors import SpecdError, UsageError
from specd.profiles.config import Config, Deployment
from specd.unit.parse import parse_unit
from specd.unit.render import profile_of_unit

# Daemon events that change what the deployment *is*, newest wins (recorded by the health monitor).
STATE_EVENTS = {"monitor-failed": "failed", "owner-stopped": "stopped by its owner", "owner-started": "running"}
# What the tuner's runs record (specd.tune.night): the newest says how the last night went.
TUNING_EVENTS = ("tune", "tune-skip", "tune-stopped", "tune-failed")


def deployment_state(history: History, unit: str) -> str | None:
    """'failed: why' or 'stopped by its owner: when' from the daemon's newest state event, if any."""
    for event in history.events(unit, limit=200):
        label = STATE_EVENTS.get(event["kind"])
        if label is not None:
            return None if event["kind"] == "owner-started" else f"{label}: {event['detail']}"
    return None


def last_tuning(history: History, unit: str) -> str | None:
    """'<UTC time> <kind>: <sentence>' of the newest tuning run (its numbers are in `history --events`)."""
    for event in history.events(unit, limit=200):
        if event["kind"] in TUNING_EVENTS:
            sentence = str(event["detail"]).split(" | ", 1)[0]
            return f"{str(event['at'])[:19].replace('T', ' ')} UTC {event['kind']}: {sentence}"
    return None


def collect_status(config: Config, deployment: Deployment, daemon: dict[str, Any]) -> dict[str, Any]:
    """Read-only: gathers, never recovers or restarts anything. `daemon` is the daemon's own report."""
    text = read_text(deployment.unit_path)
    data: dict[str, Any] = {
        "unit": deployment.unit,
        "scope": deployment.scope,
        "unit_path": str(deployment.unit_path),
        "active_profile": profile_of_unit(text) if text else None,
        "managed": bool(text and profile_of_unit(text)),
    }
    if text is None:
        data.update(unit_state="not installed", health="no unit", endpoint=None)
    else:
        try:
            state = connect_systemd(deployment.scope).unit_state(deployment.unit)
            data["unit_state"] = state.describe()
            data["main_pid"] = state.main_pid
            data["n_restarts"] = state.n_restarts
        except SpecdError as exc:
            data["unit_state"] = f"unknown ({exc.message})"
        try:
            command = parse_unit(text, str(deployment.unit_path))
            data["endpoint"] = command.base_url
            data["alias"] = command.alias
            with httpx.Client(timeout=3.0) as client:
                probe = check_once(client, command.base_url, command.alias, api_key=command.api_key)
            data["health"] = "healthy" if probe.ok else f"unhealthy: {probe.detail}"
            data["healthy"] = probe.ok
        except UsageError as exc:
            data.update(endpoint=None, health=f"unknown ({exc.message})", healthy=False)
    try:
        history = History()
        active = history.active(deployment.unit)
        data["generation"] = active.id if active else None
        marked = deployment_state(history, deployment.unit)
        if marked is not None:
            data["state"] = marked
        data["last_tuning"] = last_tuning(history, deployment.unit)
        history.close()
    except SpecdError as exc:
        data["generation"] = f"unknown ({exc.message})"
    data["daemon"] = daemon
    return data
