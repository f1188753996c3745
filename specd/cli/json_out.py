"""The documented `--json` documents of switch, rollback, diff and status (docs/json.md).

Typed here so the keys automation relies on (the Ansible collection in ansible/) are one
definition, checked by mypy. Errors keep their exit codes: a failed `switch --json` prints an
`ok: false` document on stdout, the human message on stderr, and exits 1 (2: bad input, nothing
changed; 75: another specd operation holds the lock).
"""

from __future__ import annotations

import json
from typing import Any, TypedDict

from specd import context
from specd.deploy.history import Generation, History
from specd.deploy.plan import Outcome
from specd.errors import SpecdError, StateDbError, SwitchFailed
from specd.profiles.config import Deployment

SWITCH_SCHEMA = "specd.switch/1"


class GateJson(TypedDict):
    ok: bool
    detail: str
    load_s: float  # from the restart until /health answered 200
    total_s: float  # the whole gate, stability window included


class RevertJson(TypedDict):
    outcome: str  # "reverted": the previous unit is back and healthy; "failed": the revert failed too
    state: str  # the sentence on the state reached, e.g. "reverted to plain, which is healthy again"
    journal: str | None  # the unit's last journal lines


class SwitchJson(TypedDict):
    schema: str
    ok: bool
    changed: bool  # false: the profile was already installed and running (nothing was restarted)
    kind: str  # "switch" or "rollback"
    unit: str
    profile: str | None  # what was asked for (switch) or restored (rollback)
    active_profile: str | None  # what the unit holds now
    generation: dict[str, Any] | None  # the history row: id, outcome, detail, preflight_s ... total_s
    gate: GateJson | None  # null when nothing was restarted or the operation failed
    notes: list[str]
    error: str | None
    exit_code: int
    revert: RevertJson | None  # only when a failure got as far as reverting


def _generation(generation_id: int | None) -> dict[str, Any] | None:
    if generation_id is None:
        return None
    try:
        history = History(context.state_dir().db)
    except StateDbError:
        return None  # the failure itself may be the state DB's; the message still says what happened
    try:
        found: Generation | None = history.get(generation_id)
    except StateDbError:
        found = None
    finally:
        history.close()
    return found.as_dict() if found else None


def outcome_json(outcome: Outcome, *, kind: str, deployment: Deployment, active: str | None) -> SwitchJson:
    health = outcome.health
    gate: GateJson | None = None if health is None else GateJson(ok=health.ok, detail=health.detail,
                                                                 load_s=health.load_s, total_s=health.total_s)
    return SwitchJson(schema=SWITCH_SCHEMA, ok=True, changed=not outcome.unchanged, kind=kind, unit=deployment.unit,
                      profile=outcome.generation.profile, active_profile=active,
                      generation=outcome.generation.as_dict(), gate=gate, notes=list(outcome.notes), error=None,
                      exit_code=0, revert=None)


def failure_json(error: SpecdError, *, kind: str, deployment: Deployment, profile: str | None,
                 active: str | None) -> SwitchJson:
    revert: RevertJson | None = None
    generation_id: int | None = None
    if isinstance(error, SwitchFailed) and error.revert_outcome is not None:
        revert = RevertJson(outcome=error.revert_outcome, state=error.revert_state or "", journal=error.journal)
        generation_id = error.generation_id
    return SwitchJson(schema=SWITCH_SCHEMA, ok=False, changed=False, kind=kind, unit=deployment.unit,
                      profile=profile, active_profile=active, generation=_generation(generation_id), gate=None,
                      notes=[], error=error.message, exit_code=error.exit_code, revert=revert)


def dumps(data: Any) -> str:
    return json.dumps(data, indent=2, default=str)
