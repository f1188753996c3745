"""Companion servers: profiles kept running beside the serving slot while routing is on.

A companion is a unit specd owns beside the deployment's two slots, one per routed profile:
`llama-server-route-plain.service` for profile `plain` of `llama-server.service`. It is never the
serving slot: switch, rollback, the tuner and the health monitor move and watch the slot the
pointer names, and the proxy sends a companion only the classes the routing table gives it
(specd.routing). Every check that asks whether one more server fits on the box counts the
companions that run (specd.deploy.capacity): a blue-green switch with routing on needs room for
three servers, else it restarts in place, and the proxy then sends the serving slot's classes to a
companion while it restarts.
"""

from __future__ import annotations

from pathlib import Path

from specd.deploy.unitfiles import read_text
from specd.errors import SpecdError
from specd.profiles.config import Deployment
from specd.unit.parse import UnitCommand, parse_unit

ROUTE_INFIX = "-route-"


def companion_unit(deployment: Deployment, profile: str) -> str:
    """`llama-server.service` + `plain` -> `llama-server-route-plain.service`."""
    return f"{deployment.unit.removesuffix('.service')}{ROUTE_INFIX}{profile}.service"


def companion_path(deployment: Deployment, unit: str) -> Path:
    return deployment.unit_dir / unit


def companion_units(deployment: Deployment) -> list[str]:
    """The companion unit files on disk, by name (a killed `route on` may have left one)."""
    stem = deployment.unit.removesuffix(".service")
    try:
        return sorted(p.name for p in deployment.unit_dir.glob(f"{stem}{ROUTE_INFIX}*.service"))
    except OSError:
        return []


def companion_commands(deployment: Deployment, *, but: str | None = None) -> list[UnitCommand]:
    """The command of each companion on disk (the capacity checks count their threads)."""
    commands = []
    for unit in companion_units(deployment):
        if unit == but:
            continue
        path = companion_path(deployment, unit)
        text = read_text(path)
        if text is None:
            continue
        try:
            commands.append(parse_unit(text, str(path)))
        except SpecdError:
            continue
    return commands
