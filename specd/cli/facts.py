"""What `specd status --json` adds to the status itself so one call describes a box: where its
profiles live, the tuner's pin, time-of-day pins (`schedule`) and last verdict, and the box's identity
and hardware (GPUs).
The Ansible collection's `specd_facts` reads exactly this (docs/json.md)."""

from __future__ import annotations

from typing import Any

from specd import context
from specd.deploy.history import History
from specd.deploy.status import last_tuning_event, parse_record
from specd.errors import StateDbError
from specd.profiles.config import Config, Deployment
from specd.routing.state import RoutingState, read_state
from specd.tune.pins import get_pin, period_pins


def last_tune(unit: str) -> dict[str, Any] | None:
    """The newest tuning event (the kinds `specd status` shows as its last tuning): when, what kind,
    its sentence and (for a decision) its numbers."""
    history = History(context.state_dir().db)
    try:
        event = last_tuning_event(history, unit)
    finally:
        history.close()
    if event is None:
        return None
    reason, numbers = parse_record(str(event["detail"]))
    return {"at": event["at"], "kind": event["kind"], "reason": reason, **numbers}


def pins_row(deployment: Deployment) -> str | None:
    """`specd status`'s pins row: the all-day pin, the time-of-day pins, or None when nothing is pinned."""
    try:
        pin, schedule = get_pin(deployment.unit), period_pins(deployment.unit)
    except StateDbError:
        return None  # status reports the state DB's problem in its history row
    parts = [f"{pin.profile} all day (the schedule waits)" if schedule else f"{pin.profile} all day"] if pin else []
    parts += [f"{period} {p.profile}" for period, p in schedule.items()]
    return ", ".join(parts) or None


def routing_row(deployment: Deployment) -> str:
    """`specd status`'s routing line: off, or how it routes and to what."""
    routing = read_state(context.state_dir(), deployment.unit)
    if not routing.on:
        return "off" if not routing.table.routes else f"off (a table is learned: {_routes_line(routing)})"
    if routing.mode == "per-request":
        return f"on, per request: {_routes_line(routing)}"
    residents = ", ".join(f"{r.profile} ({r.unit})" for r in routing.residents)
    return f"on: {residents} beside the serving profile; {_routes_line(routing)}"


def _routes_line(routing: RoutingState) -> str:
    shown = ", ".join(f"{c} -> {r.profile}" for c, r in routing.table.routes.items())
    return shown or "no table yet"


def facts_of(config: Config, deployment: Deployment) -> dict[str, Any]:
    facts: dict[str, Any] = {"config_path": str(config.path), "profiles_dir": str(deployment.profiles_dir),
                             "metrics_listen": config.daemon.metrics_listen}
    try:
        pin = get_pin(deployment.unit)
        facts["pin"] = None if pin is None else {"profile": pin.profile, "at": pin.at}
        facts["schedule"] = {period: p.profile for period, p in period_pins(deployment.unit).items()}
        facts["last_tune"] = last_tune(deployment.unit)
    except StateDbError as exc:
        facts["pin"] = facts["last_tune"] = None
        facts["schedule"] = {}
        facts["state_db_error"] = exc.message
    routing = read_state(context.state_dir(), deployment.unit)
    facts["routing"] = {"on": routing.on, "mode": routing.mode, "residents": [r.profile for r in routing.residents],
                        "routes": {c: r.profile for c, r in routing.table.routes.items()}}
    from specd.setup.box import box_identity

    facts["box"] = box_identity().as_json()
    return facts
