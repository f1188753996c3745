"""`specd pin NAME` / `unpin`: keep the tuner from moving a deployment off a profile.

One row per unit in the state DB. A pin only binds the tuner (and its nightly run): a human's
`specd switch` still works, and the tuner then leaves whatever is active alone.

A pin for one time of day (`specd pin NAME --period afternoon`, one row per unit and period) is a
schedule: the daemon switches to it when the period begins and back when it ends
(specd.tune.schedule), and the tuner does not move the deployment while it is in force. An all-day
pin holds everything: the schedule waits until it is removed.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass

from specd import store
from specd.tune.periods import PERIODS, Period, period_of

SCHEMA = """
CREATE TABLE IF NOT EXISTS pins (
    unit TEXT PRIMARY KEY,
    profile TEXT NOT NULL,
    at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS period_pins (
    unit TEXT NOT NULL,
    period TEXT NOT NULL,
    profile TEXT NOT NULL,
    at REAL NOT NULL,
    PRIMARY KEY (unit, period)
);
"""


@dataclass(frozen=True)
class Pin:
    unit: str
    profile: str
    at: float
    period: Period | None = None  # None: all day


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


def period_pins(unit: str) -> dict[Period, Pin]:
    """The unit's schedule: period -> pin, in the day's order."""
    conn = _open()
    try:
        rows = conn.execute("SELECT period, profile, at FROM period_pins WHERE unit=?", (unit,)).fetchall()
    finally:
        conn.close()
    by = {str(row["period"]): row for row in rows}
    return {period: Pin(unit, by[period]["profile"], by[period]["at"], period) for period, _, _ in PERIODS
            if period in by}


def set_period_pin(unit: str, period: Period, profile: str) -> Pin:
    pin = Pin(unit, profile, time.time(), period)
    conn = _open()
    try:
        conn.execute("INSERT OR REPLACE INTO period_pins (unit, period, profile, at) VALUES (?,?,?,?)",
                     (unit, period, profile, pin.at))
    finally:
        conn.close()
    return pin


def clear_period_pins(unit: str, periods: tuple[Period, ...] | None = None) -> dict[Period, Pin]:
    """Remove the pins of `periods` (None: the whole schedule); returns what was removed."""
    old = period_pins(unit)
    gone = {p: pin for p, pin in old.items() if periods is None or p in periods}
    if gone:
        conn = _open()
        try:
            conn.executemany("DELETE FROM period_pins WHERE unit=? AND period=?", [(unit, p) for p in gone])
        finally:
            conn.close()
    return gone


def pin_in_force(unit: str, at: float) -> Pin | None:
    """What binds the tuner at unix time `at`: the all-day pin, else the pin of that time of day."""
    return get_pin(unit) or period_pins(unit).get(period_of(at))
