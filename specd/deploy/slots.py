"""The two slots a deployment's server can run in, which one serves, and the port each server gets.

A blue-green switch starts the new profile beside the old one, so it needs a second unit and a
second port. The **blue** slot is the deployment's own unit (`llama-server.service`, the one in
specd.toml); the **green** slot is a companion unit specd owns beside it
(`llama-server-green.service`). Which slot serves is one small file in the state directory (the
*slot pointer*, written atomically): no file means blue, so a deployment that never switched
blue-green reads exactly as before. Everything that follows "the installed unit" — the proxy's
backend, the health monitor, the watcher, status, rollback — reads the serving slot through
`serving_slot`; history, backups, locks and intents stay keyed by the deployment's own unit.

A server's port is its unit text's `--port`; a blue-green switch moves the new server to the
deployment's spare port when the old one listens on the profile's port (`with_port`), so over
successive switches the server alternates between the two ports. The proxy follows the text.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from specd.durable import atomic_write
from specd.endpoint import tcp_port
from specd.errors import UsageError
from specd.paths import StateDir
from specd.profiles.config import Deployment
from specd.unit.parse import parse_unit
from specd.unit.render import exec_start_line, profile_of_unit

log = logging.getLogger(__name__)

SlotName = Literal["blue", "green"]
SLOT_NAMES: tuple[SlotName, SlotName] = ("blue", "green")
# How a switch replaces the server: start beside it and flip the proxy, or restart in place.
Strategy = Literal["blue-green", "restart"]
StrategyRequest = Literal["auto", "blue-green", "restart"]
STRATEGY_REQUESTS: tuple[StrategyRequest, ...] = ("auto", "blue-green", "restart")
GREEN_SUFFIX = "-green"


@dataclass(frozen=True)
class Slot:
    """One place a deployment's server runs: its name, systemd unit and unit file."""

    name: SlotName
    unit: str
    unit_path: Path


def companion_unit(unit: str) -> str:
    """The green slot's unit name: `llama-server.service` -> `llama-server-green.service` (an
    instance `llama-server@qwen.service` -> `llama-server@qwen-green.service`, a file of its own)."""
    return f"{unit.removesuffix('.service')}{GREEN_SUFFIX}.service"


def slot(deployment: Deployment, name: SlotName) -> Slot:
    unit = deployment.unit if name == "blue" else companion_unit(deployment.unit)
    return Slot(name, unit, deployment.unit_dir / unit)


def other(name: SlotName) -> SlotName:
    return "green" if name == "blue" else "blue"


def slots_of(deployment: Deployment) -> tuple[Slot, Slot]:
    return slot(deployment, "blue"), slot(deployment, "green")


def slot_of_unit(deployment: Deployment, unit: str) -> Slot | None:
    """The slot whose systemd unit is `unit`, if it is one of this deployment's."""
    return next((s for s in slots_of(deployment) if s.unit == unit), None)


def read_pointer(state: StateDir, deployment: Deployment) -> SlotName:
    """The slot that serves: blue unless the pointer says green (a missing file is blue)."""
    path = state.slot_pointer(deployment.unit)
    try:
        value = json.loads(path.read_text(encoding="utf-8")).get("slot")
    except FileNotFoundError:
        return "blue"
    except (OSError, ValueError, AttributeError) as exc:
        log.warning("%s: unreadable slot pointer (%s); taking the blue slot", path, exc)
        return "blue"
    return "green" if value == "green" else "blue"


def write_pointer(state: StateDir, deployment: Deployment, name: SlotName) -> None:
    """Make `name` the serving slot: one atomic rename, so a reader sees the old slot or the new one."""
    body = {"slot": name, "unit": slot(deployment, name).unit}
    atomic_write(state.slot_pointer(deployment.unit), json.dumps(body).encode(), mode=0o600)


def serving_slot(state: StateDir, deployment: Deployment) -> Slot:
    return slot(deployment, read_pointer(state, deployment))


# ---- ports ---------------------------------------------------------------------------------------


def port_of(text: str, where: str = "unit", *, needed_by: str = "a second server beside it") -> int:
    """The port a unit's server listens on (its base URL's); a Unix socket is refused (UsageError), saying
    that `needed_by` needs a port."""
    return tcp_port(parse_unit(text, where).base_url, needed_by)


def with_port(text: str, port: int, where: str = "unit") -> str:
    """The same unit text with the server on `port`: only for units specd rendered (one ExecStart=
    line of quoted words), so the rewrite is exact; the result is parsed back and checked."""
    if profile_of_unit(text) is None:
        raise UsageError(f"{where}: not a unit specd rendered; its port is not rewritten")
    argv = list(parse_unit(text, where).argv)
    for index, word in enumerate(argv):
        if word == "--port" and index + 1 < len(argv):
            argv[index + 1] = str(port)
            break
        if word.startswith("--port="):
            argv[index] = f"--port={port}"
            break
    else:
        argv += ["--port", str(port)]
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.startswith("ExecStart=")]
    if len(starts) != 1 or lines[starts[0]].rstrip("\n").endswith("\\"):
        raise UsageError(f"{where}: ExecStart= is not one line; its port is not rewritten")
    lines[starts[0]] = f"ExecStart={exec_start_line(argv)}\n"
    rewritten = "".join(lines)
    if parse_unit(rewritten, where).argv != argv:  # pragma: no cover - a quoting bug would show here
        raise UsageError(f"{where}: rewriting the port changed more than the port")
    return rewritten


def spare_port(deployment: Deployment, profile_port: int) -> int:
    """The port a new server takes when the old one holds the profile's: `[proxy] spare_port`, else
    the profile's port + 1."""
    configured = deployment.proxy.spare_port if deployment.proxy is not None else None
    return configured if configured is not None else profile_port + 1


def port_beside(deployment: Deployment, text: str, serving_port: int | None, where: str = "unit") -> int:
    """The port a server of `text` listens on when it starts beside one on `serving_port`."""
    wanted = port_of(text, where)
    if serving_port is None or wanted != serving_port:
        return wanted
    spare = spare_port(deployment, wanted)
    return spare if spare != serving_port else wanted + 1


def same_but_port(installed: str, rendered: str) -> bool:
    """Is `installed` the `rendered` unit, perhaps moved to another port by a blue-green switch?"""
    if installed == rendered:
        return True
    try:
        return with_port(rendered, port_of(installed)) == installed
    except (UsageError, ValueError, IndexError):
        return False
