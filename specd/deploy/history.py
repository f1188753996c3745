"""SQLite history of generations: every unit specd (or a human) installed, and how it went."""

from __future__ import annotations

import builtins
import json
import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from specd.deploy.slots import SlotName, Strategy
from specd.errors import StateDbError
from specd.store import add_columns, connect, ensure_schema, file_identity

SCHEMA = """
CREATE TABLE IF NOT EXISTS generations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    unit TEXT NOT NULL,
    created_at TEXT NOT NULL,
    kind TEXT NOT NULL,
    profile TEXT,
    unit_sha256 TEXT,
    backup_path TEXT,
    previous_id INTEGER,
    restores_id INTEGER,
    trigger TEXT NOT NULL,
    outcome TEXT NOT NULL,
    detail TEXT NOT NULL DEFAULT '',
    preflight_s REAL,
    restart_s REAL,
    health_s REAL,
    total_s REAL,
    slot TEXT,
    strategy TEXT
);
CREATE INDEX IF NOT EXISTS generations_unit ON generations(unit, id);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    unit TEXT NOT NULL,
    at TEXT NOT NULL,
    kind TEXT NOT NULL,
    detail TEXT NOT NULL
);
"""

GenerationKind = Literal["switch", "rollback", "external-edit"]
# pending: under way (or interrupted); ok: installed and healthy; reverted: failed and put back;
# failed: failed and the revert failed too.
GenerationOutcome = Literal["pending", "ok", "reverted", "failed"]
# Who asked: a person at the CLI or the status page, the daemon (monitor, watcher), the tuner, a
# bench/verify run, or the per-period pins (the daemon at a period's start and end).
Trigger = Literal["cli", "daemon", "tuner", "bench", "verify", "web", "schedule"]
# Columns added after the first release: added to older databases when they are opened.
_ADDED_COLUMNS = (("slot", "TEXT"), ("strategy", "TEXT"))


@dataclass(frozen=True)
class Generation:
    id: int
    unit: str
    created_at: str
    kind: GenerationKind
    profile: str | None
    unit_sha256: str | None
    backup_path: str | None
    previous_id: int | None
    restores_id: int | None
    trigger: Trigger
    outcome: GenerationOutcome
    detail: str
    preflight_s: float | None
    restart_s: float | None
    health_s: float | None
    total_s: float | None
    slot: SlotName | None = None  # where this generation's server ran (None: before slots existed)
    strategy: Strategy | None = None  # how the server was replaced (None: a hand edit, or before strategies)

    @property
    def content_id(self) -> int:
        """The generation whose unit text this one installed (itself, or what a rollback restored)."""
        return self.restores_id if self.restores_id is not None else self.id

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def split_numbers(detail: str) -> tuple[str, dict[str, Any] | None]:
    """An event detail written as "sentence | {json numbers}" (the tuner's decisions) read back:
    the sentence, and the numbers (None when there are none or they do not parse)."""
    sentence, sep, numbers = detail.rpartition(" | ")
    if not sep:
        return detail, None
    try:
        parsed = json.loads(numbers)
    except ValueError:
        return detail, None
    return sentence, parsed if isinstance(parsed, dict) else None


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class History:
    def __init__(self, db_path: Path) -> None:
        self.path = db_path
        self.conn = connect(db_path)
        ensure_schema(self.conn, SCHEMA)
        add_columns(self.conn, "generations", _ADDED_COLUMNS)
        self._identity = file_identity(db_path)

    @classmethod
    def in_memory(cls) -> History:
        """A throwaway history, for rolling back from the .pre-* files when the state DB is unusable."""
        return cls(Path(":memory:"))

    def _execute(self, sql: str, params: tuple[Any, ...] = ()) -> sqlite3.Cursor:
        if file_identity(self.path) != self._identity:  # the file was deleted or replaced: reopen it
            self.conn.close()
            self.conn = connect(self.path)
            ensure_schema(self.conn, SCHEMA)
            add_columns(self.conn, "generations", _ADDED_COLUMNS)
            self._identity = file_identity(self.path)
        try:
            return self.conn.execute(sql, params)
        except sqlite3.DatabaseError as exc:
            raise StateDbError(
                f"state database {self.path or 'specd.db'}: {exc}",
                hint="another process may hold it locked, or it is corrupt; the unit can still be rolled back "
                "from its .pre-* backups (`specd rollback`)",
            ) from exc

    def close(self) -> None:
        self.conn.close()

    def add(self, unit: str, *, kind: GenerationKind, profile: str | None, unit_sha256: str | None,
            backup_path: Path | None, previous_id: int | None, trigger: Trigger,
            outcome: GenerationOutcome = "pending", restores_id: int | None = None,
            detail: str = "", slot: SlotName | None = None, strategy: Strategy | None = None) -> int:
        cursor = self._execute(
            "INSERT INTO generations (unit, created_at, kind, profile, unit_sha256, backup_path, previous_id,"
            " restores_id, trigger, outcome, detail, slot, strategy) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (unit, now_iso(), kind, profile, unit_sha256, str(backup_path) if backup_path else None, previous_id,
             restores_id, trigger, outcome, detail, slot, strategy),
        )
        return int(cursor.lastrowid or 0)

    def finish(self, generation_id: int, *, outcome: GenerationOutcome, detail: str = "",
               preflight_s: float | None = None,
               restart_s: float | None = None, health_s: float | None = None, total_s: float | None = None) -> None:
        self._execute(
            "UPDATE generations SET outcome=?, detail=?, preflight_s=COALESCE(?, preflight_s),"
            " restart_s=COALESCE(?, restart_s), health_s=COALESCE(?, health_s), total_s=COALESCE(?, total_s)"
            " WHERE id=?",
            (outcome, detail, preflight_s, restart_s, health_s, total_s, generation_id),
        )

    def get(self, generation_id: int) -> Generation | None:
        row = self._execute("SELECT * FROM generations WHERE id=?", (generation_id,)).fetchone()
        return Generation(**dict(row)) if row else None

    def list(self, unit: str, limit: int = 50) -> list[Generation]:
        rows = self._execute(
            "SELECT * FROM generations WHERE unit=? ORDER BY id DESC LIMIT ?", (unit, limit)
        ).fetchall()
        return [Generation(**dict(row)) for row in rows]

    def active(self, unit: str) -> Generation | None:
        """The generation now installed: the newest one that succeeded."""
        row = self._execute(
            "SELECT * FROM generations WHERE unit=? AND outcome='ok' ORDER BY id DESC LIMIT 1", (unit,)
        ).fetchone()
        return Generation(**dict(row)) if row else None

    def event(self, unit: str, kind: str, detail: str) -> None:
        self._execute("INSERT INTO events (unit, at, kind, detail) VALUES (?,?,?,?)", (unit, now_iso(), kind, detail))

    def events(self, unit: str, limit: int = 50) -> builtins.list[sqlite3.Row]:
        return list(self._execute(
            "SELECT * FROM events WHERE unit=? ORDER BY id DESC LIMIT ?", (unit, limit)
        ).fetchall())

    def prune(self, unit: str, keep: int) -> int:
        cursor = self._execute(
            "DELETE FROM generations WHERE unit=? AND id NOT IN"
            " (SELECT id FROM generations WHERE unit=? ORDER BY id DESC LIMIT ?)", (unit, unit, keep)
        )
        return cursor.rowcount
