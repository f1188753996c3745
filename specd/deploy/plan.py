"""What a switch, rollback or revert installs and how it is checked: the target (unit text, where
and how to health-gate it), the outcome and the seams' signatures. Data only; the steps that install
it are specd.deploy.steps, run by specd.deploy.transaction."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from specd.deploy.health import HealthResult
from specd.deploy.history import Generation
from specd.deploy.preflight import Preflight
from specd.profiles.keys import BY_NAME
from specd.unit.parse import parse_unit

# The fault points inside each atomic write of the backup and the unit (specd.durable.atomic_write).
WRITE_STEPS = tuple(f"{target}-{moment}" for target in ("backup", "unit")
                    for moment in ("before-fsync", "before-rename", "before-dirsync"))
DEFAULT_GATE_TIMEOUT_S: float = BY_NAME["health_timeout_s"].default  # for a unit specd did not render


HealthGate = Callable[..., HealthResult]
JournalReader = Callable[[str, str], str]
FaultHook = Callable[[str], None]
StepHook = Callable[[str, str], None]  # (step, detail): a step of a switch, rollback or revert passed
PreflightRunner = Callable[..., Preflight]  # (deployment, profile name, *, current_main_pid) -> Preflight


@dataclass(frozen=True)
class Outcome:
    generation: Generation
    health: HealthResult | None
    notes: tuple[str, ...] = ()
    unchanged: bool = False


@dataclass(frozen=True)
class Target:
    """What to install: the unit text and how to health-gate it."""

    text: str
    profile: str | None
    alias: str | None  # None: router mode
    base_url: str
    timeout_s: float
    stability_s: float
    api_key: str | None = None
    secrets: tuple[tuple[Path, str], ...] = ()  # (path, content) written 0600 before the unit


def target_from_text(text: str, profile: str | None, *, where: str, stability_s: float = 5.0) -> Target:
    command = parse_unit(text, where)
    return Target(text, profile, command.alias, command.base_url, DEFAULT_GATE_TIMEOUT_S, stability_s,
                  command.api_key)
