"""The intent record: what a transaction in progress is doing, so a crash can be undone.

Written (atomically, 0600) before the first step touches anything, rewritten after each step with
the steps done, removed once the operation is committed or reverted. Before anything changes, each
step saves what its undo will need (`saved`, by step name: the text a unit file held, the PID of
the server that ran, whether it was enabled), as tuned saves each value before it changes it.
Whoever takes the lock next and finds a record reverts it: finished or reverted, never half.

A record written by specd before the transaction engine (one flat record with `step` only) is read
into this form, so an upgrade in the middle of a crashed switch can still undo it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from specd.deploy.unitfiles import atomic_write

SwitchKind = Literal["switch", "rollback"]  # an operation with a history row
OperationKind = Literal["switch", "rollback", "shadow"]
PlanName = Literal["restart", "blue-green", "shadow"]
SlotName = Literal["blue", "green"]


@dataclass
class Intent:
    unit: str  # the deployment's unit: intents, history, locks and backups are keyed by it
    kind: OperationKind
    strategy: PlanName  # which plan of steps runs (specd.deploy.steps.PLANS)
    profile: str | None  # what is being installed
    old_profile: str | None  # what served when it began
    old_slot: SlotName  # the slot that served when it began
    slot: SlotName  # the slot the new unit goes into (the same one for a restart)
    generation_id: int | None = None  # its history row (a shadow bench's candidate has none)
    backup_path: str | None = None
    saved: dict[str, dict[str, Any]] = field(default_factory=dict)  # step -> what its undo needs
    done: list[str] = field(default_factory=list)  # the steps done, in order
    step: str = "intent"  # the last step done ("intent": none yet), for status and crash tests

    def value(self, step: str, key: str) -> Any:
        """What `step` saved under `key` before it acted (None when it saved nothing)."""
        return self.saved.get(step, {}).get(key)


def save(intent: Intent, path: Path) -> None:
    atomic_write(path, json.dumps(asdict(intent), indent=1).encode(), mode=0o600)


def load(path: Path) -> Intent | None:
    try:
        data = json.loads(path.read_text())
        return Intent(**(data if "done" in data else _from_flat(data)))
    except FileNotFoundError:
        return None
    except (ValueError, TypeError, KeyError, AttributeError):
        path.rename(path.with_suffix(".corrupt"))
        return None


def clear(path: Path) -> None:
    path.unlink(missing_ok=True)


# The steps as the flat record named them (frozen: only records written before the engine use them).
_FLAT_STEPS = {"restart": ("backup", "write", "reload", "restart", "gate"),
               "blue-green": ("backup", "write", "reload", "start", "gate", "flip", "drain", "stop-old", "enable")}


def _from_flat(data: dict[str, Any]) -> dict[str, Any]:
    """A flat record of an older specd, in this form: the same facts, saved under the step that needs them."""
    strategy = data.get("strategy", "restart")
    steps = _FLAT_STEPS[strategy]
    step = data.get("step", "intent")
    blue_green = strategy == "blue-green"
    old_server = {"main_pid": data.get("old_main_pid", 0), "active": data["old_active"],
                  "sha256": data["old_sha256"], "existed": data["old_existed"]}
    return {
        "unit": data["unit"], "kind": data["kind"], "strategy": strategy, "profile": data["profile"],
        "old_profile": data["old_profile"], "old_slot": data.get("old_slot", "blue"), "slot": data.get("slot", "blue"),
        "generation_id": data["generation_id"], "backup_path": data["backup_path"],
        "saved": {"write": {"path": data["unit_path"],
                            "before": data.get("slot_old_sha256") if blue_green else data["old_sha256"]},
                  "stop-old" if blue_green else "restart": old_server,
                  "enable": {"enabled": data.get("old_enabled", False)}},
        "done": list(steps[:steps.index(step) + 1]) if step in steps else [], "step": step,
    }
