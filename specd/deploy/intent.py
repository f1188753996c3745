"""The intent record: what a switch or rollback in progress is doing, so a crash can be undone.

Written (atomically) before the backup and the unit are touched, removed once the generation is
committed or reverted. Whoever takes the lock next and finds one reverts: finished or reverted,
never half.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from specd.deploy.unitfiles import atomic_write

OperationKind = Literal["switch", "rollback"]


@dataclass
class Intent:
    unit: str
    unit_path: str
    generation_id: int
    profile: str | None
    kind: OperationKind
    old_existed: bool
    old_active: bool
    old_sha256: str | None
    old_profile: str | None
    backup_path: str | None
    new_sha256: str
    step: str = "intent"
    old_main_pid: int = 0  # the server running when the switch began: still it means never restarted
    # Where the new unit goes (specd.deploy.slots). A restart replaces the serving slot's unit in place
    # (slot == old_slot); a blue-green switch writes the free slot, starts it beside the old server and
    # flips the slot pointer. Intents written before slots existed read as a restart of the blue slot.
    strategy: Literal["blue-green", "restart"] = "restart"
    slot: Literal["blue", "green"] = "blue"
    old_slot: Literal["blue", "green"] = "blue"
    slot_old_sha256: str | None = None  # blue-green: what the free slot's file held (None: no file)
    old_enabled: bool = False  # blue-green: the old slot's unit was enabled (the new one takes it over)


def save(intent: Intent, path: Path) -> None:
    atomic_write(path, json.dumps(asdict(intent), indent=1).encode(), mode=0o600)


def load(path: Path) -> Intent | None:
    try:
        return Intent(**json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (ValueError, TypeError):
        path.rename(path.with_suffix(".corrupt"))
        return None


def clear(path: Path) -> None:
    path.unlink(missing_ok=True)
