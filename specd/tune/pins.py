"""`specd pin NAME` / `unpin`: keep the tuner from moving a deployment off a profile.

One row per unit in the state DB. A pin only binds the tuner (and its nightly run): a human's
`specd switch` still works, and the tuner then leaves whatever is active alone.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass

from specd import store

SCHEMA = """
CREATE TABLE IF NOT EXISTS pins (
    unit TEXT PRIMARY KEY,
    profile TEXT NOT NULL,
    at REAL NOT NULL
);
"""


@dataclass(frozen=True)
class Pin:
    unit: str
    profile: str
    at: float


def _open() -> sqlite3.Connection:
    conn = store.connect()
    store.ensure_schema(conn, SCHEMA)
    return conn


def get_pin(unit: str) -> Pin | None:
    conn = _open()
    try:
        row = conn.execute("SELECT unit, profile, at FROM pins WHERE unit=?", (unit,)).fetchone()
    finally:
        conn.close()
    return Pin(row["unit"], row["profile"], row["at"]) if row else None


def set_pin(unit: str, profile: str) -> Pin:
    pin = Pin(unit, profile, time.time())
    conn = _open()
    try:
        conn.execute("INSERT OR REPLACE INTO pins (unit, profile, at) VALUES (?,?,?)", (unit, profile, pin.at))
    finally:
        conn.close()
    return pin


def clear_pin(unit: str) -> Pin | None:
    """Remove the pin; returns what was pinned, or None if nothing was."""
    old = get_pin(unit)
    if old is not None:
        conn = _open()
        try:
            conn.execute("DELETE FROM pins WHERE unit=?", (unit,))
        finally:
            conn.close()
    return old
