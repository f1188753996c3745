"""A deployment's routing state: on or off, how, which companions are resident, the table.

One JSON file per deployment in the state directory, written atomically (0600), so the proxy and
`specd status` read the state before a change or after it, never half of it. No file, or routing
off: one server, exactly as without routing. The file is the truth about companions: a companion
unit on disk that the state does not list (a `route on` killed half-way) is stopped and removed by
the next `route on` or `route off` (specd.routing.residents.reconcile).

`mode` is `servers` (a companion server per extra profile; the proxy picks the server) or
`per-request` (one server; the proxy stamps each class's draft settings on its requests, where the
probe found the engine honours them: specd.routing.probe).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from specd.durable import atomic_write
from specd.errors import UsageError
from specd.paths import StateDir
from specd.routing.stamp import Stamp
from specd.routing.table import RoutingTable, table_from_json
from specd.traffic.taskclass import TASK_CLASSES, TaskClass

log = logging.getLogger(__name__)

Mode = Literal["servers", "per-request"]
MODES: tuple[Mode, ...] = ("servers", "per-request")


@dataclass(frozen=True)
class Resident:
    """A companion server specd keeps running beside the serving slot while routing is on."""

    profile: str
    unit: str


@dataclass(frozen=True)
class RoutingState:
    on: bool = False
    mode: Mode = "servers"
    residents: tuple[Resident, ...] = ()
    table: RoutingTable = field(default_factory=RoutingTable)
    stamps: Mapping[TaskClass, Stamp] = field(default_factory=dict)  # per-request mode: class -> fields
    probe: Mapping[str, Any] | None = None  # the last per-request probe (specd.routing.probe.ProbeResult)
    changed_at: float = 0.0
    note: str = ""  # why it is as it is, in one sentence

    def resident_profiles(self) -> list[str]:
        return [r.profile for r in self.residents]

    def as_json(self) -> dict[str, Any]:
        return {"on": self.on, "mode": self.mode,
                "residents": [{"profile": r.profile, "unit": r.unit} for r in self.residents],
                "table": self.table.as_json(), "stamps": {c: dict(s) for c, s in self.stamps.items()},
                "probe": dict(self.probe) if self.probe is not None else None,
                "changed_at": self.changed_at, "note": self.note}


def _stamps(raw: Any, where: str) -> dict[TaskClass, Stamp]:
    if not isinstance(raw, Mapping):
        raise UsageError(f"{where}: 'stamps' must be an object")
    found: dict[TaskClass, Stamp] = {}
    for task_class in TASK_CLASSES:
        fields = raw.get(task_class)
        if fields is None:
            continue
        if not isinstance(fields, Mapping) or not all(
                isinstance(v, int | float) and not isinstance(v, bool) for v in fields.values()):
            raise UsageError(f"{where}: stamps.{task_class} must map field names to numbers")
        found[task_class] = {str(k): v for k, v in fields.items()}
    return found


def state_from_json(data: Mapping[str, Any], where: str) -> RoutingState:
    mode = data.get("mode", "servers")
    if mode not in MODES:
        raise UsageError(f"{where}: mode {mode!r} is not one of {', '.join(MODES)}")
    residents = []
    for index, raw in enumerate(data.get("residents", [])):
        if not isinstance(raw, Mapping) or not isinstance(raw.get("profile"), str) or not isinstance(
                raw.get("unit"), str):
            raise UsageError(f"{where}: residents[{index}] needs a profile and a unit")
        residents.append(Resident(raw["profile"], raw["unit"]))
    probe = data.get("probe")
    return RoutingState(
        on=bool(data.get("on", False)), mode="per-request" if mode == "per-request" else "servers",
        residents=tuple(residents), table=table_from_json(data.get("table", {}), f"{where}: table"),
        stamps=_stamps(data.get("stamps", {}), where), probe=dict(probe) if isinstance(probe, Mapping) else None,
        changed_at=float(data.get("changed_at", 0.0) or 0.0), note=str(data.get("note", "")))


def read_state(state: StateDir, unit: str) -> RoutingState:
    """The deployment's routing state; no file is routing off. A file that cannot be read is routing
    off too (one server is always safe), with a warning naming it."""
    path = state.routing(unit)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, Mapping):
            raise UsageError(f"{path}: not a JSON object")
        return state_from_json(data, str(path))
    except FileNotFoundError:
        return RoutingState()
    except (OSError, ValueError, UsageError) as exc:
        log.warning("%s: unreadable routing state (%s); routing is off", path, exc)
        return RoutingState()


def write_state(state: StateDir, unit: str, routing: RoutingState) -> None:
    atomic_write(state.routing(unit), json.dumps(routing.as_json(), indent=1).encode(), mode=0o600)


def with_table(routing: RoutingState, table: RoutingTable) -> RoutingState:
    return replace(routing, table=table)
