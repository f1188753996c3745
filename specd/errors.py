"""The one exception tree specd raises; every message is meant for the user.

    SpecdError                 exit 1 unless a subclass says otherwise
    ├── BadInput               exit 2: nothing was changed
    │   ├── ConfigError        specd.toml is wrong (file, line, key)
    │   ├── ProfileError       a profile file is wrong (file, line, key)
    │   ├── PreflightError     the profile is valid but cannot run on this box
    │   └── UsageError         a command was called with arguments that do not fit
    ├── LockBusy               another specd operation holds the lock (exit 75)
    ├── SystemdError           the service manager refused or is unreachable
    ├── HealthError            the endpoint did not turn healthy
    ├── SwitchFailed           a switch or rollback failed; says what state the box is in
    ├── StateDbError           the state database is locked too long or is not a database
    ├── FidelityError          a profile answers structured prompts differently from the reference
    └── Interrupted            the nightly run stopped because clients sent requests
"""

from __future__ import annotations


class SpecdError(Exception):
    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if self.hint is None else f"{self.message}\n  hint: {self.hint}"


class BadInput(SpecdError):
    exit_code = 2


class ConfigError(BadInput):
    pass


class ProfileError(BadInput):
    pass


class PreflightError(BadInput):
    pass


class UsageError(BadInput):
    pass


class LockBusy(SpecdError):
    exit_code = 75


class SystemdError(SpecdError):
    pass


class HealthError(SpecdError):
    pass


class SwitchFailed(SpecdError):
    """A switch or rollback failed. Where it got as far as reverting, the typed fields say how the
    revert went, so `specd switch --json` (and the Ansible modules reading it) need not parse the
    message: `revert_outcome` is the history outcome ("reverted" or "failed"), `revert_state` the
    sentence on the state reached, `generation_id` the failed generation."""

    def __init__(self, message: str, *, hint: str | None = None, generation_id: int | None = None,
                 revert_outcome: str | None = None, revert_state: str | None = None,
                 journal: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.generation_id = generation_id
        self.revert_outcome = revert_outcome
        self.revert_state = revert_state
        self.journal = journal


class Interrupted(SpecdError):
    """The nightly run stopped (and put the live profile back) because clients sent requests."""


class FidelityError(SpecdError):
    """A profile answers structured prompts differently from the reference."""


class StateDbError(SpecdError):
    """The state DB is locked for too long or is not a database."""
