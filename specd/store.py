"""The state database: one SQLite file shared by history, traffic, bench and tuner.

Each module owns its own tables and creates them with `ensure_schema`; this module only knows
how to open the file safely from several processes (CLI, daemon) at once.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path

from specd import paths
from specd.errors import StateDbError


def connect(db_path: Path | None = None, *, timeout_s: float | None = None) -> sqlite3.Connection:
    path = db_path or paths.db_path()
    if timeout_s is None:
        timeout_s = float(os.environ.get("SPECD_DB_TIMEOUT_S", "10"))
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        conn = sqlite3.connect(path, timeout=timeout_s, isolation_level=None, check_same_thread=False)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA foreign_keys=ON")
    except sqlite3.DatabaseError as exc:
        raise StateDbError(
            f"state database {path} cannot be used: {exc}",
            hint="move it aside; the unit can still be rolled back from its .pre-* backups",
        ) from exc
    return conn


def file_identity(db_path: Path | None = None) -> tuple[int, int] | None:
    """(device, inode) of the state file, None when it is missing. A long-lived connection (the
    daemon's) compares it before writing: when the file was deleted or replaced under it, it
    reopens, rather than writing on into a deleted file that no reader will ever see."""
    path = db_path or paths.db_path()
    if str(path) == ":memory:":
        return (0, 0)
    try:
        stat = path.stat()
    except OSError:
        return None
    return (stat.st_dev, stat.st_ino)


def ensure_schema(conn: sqlite3.Connection, ddl: str) -> None:
    try:
        conn.executescript(ddl)
    except sqlite3.DatabaseError as exc:
        raise StateDbError(
            f"state database cannot be used: {exc}",
            hint="move it aside; the unit can still be rolled back from its .pre-* backups",
        ) from exc


def add_columns(conn: sqlite3.Connection, table: str, columns: Sequence[tuple[str, str]]) -> None:
    """Add the (name, SQL type) columns `table` lacks: a database made by an older specd gains them on first use."""
    have = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
    for name, ddl in columns:
        if name not in have:
            try:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {ddl}")
            except sqlite3.OperationalError as exc:  # another process added it first
                if "duplicate column" not in str(exc):
                    raise
