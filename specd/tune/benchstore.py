"""Where bench runs are kept: one row per run and one per measured request, in the state DB."""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import asdict

from specd import store
from specd.tune.bench import Report, Settings

SCHEMA = """
CREATE TABLE IF NOT EXISTS bench_runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    unit TEXT NOT NULL,
    at REAL NOT NULL,
    workload TEXT NOT NULL,
    profiles TEXT NOT NULL,
    settings TEXT NOT NULL,
    summary TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS bench_samples (
    run_id INTEGER NOT NULL REFERENCES bench_runs(id) ON DELETE CASCADE,
    profile TEXT NOT NULL,
    request_index INTEGER NOT NULL,
    task_class TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    prefill_ms REAL NOT NULL,
    decode_ms REAL NOT NULL,
    wall_ms REAL NOT NULL,
    draft_n INTEGER,
    draft_accepted INTEGER,
    vram_bytes INTEGER
);
CREATE INDEX IF NOT EXISTS bench_samples_run ON bench_samples(run_id, profile);
"""
# Columns added after the first release: added to older databases on first use.
_ADDED_COLUMNS = (("concurrency", "INTEGER NOT NULL DEFAULT 1"), ("cache_n", "INTEGER NOT NULL DEFAULT 0"),
                  ("reasoning_tokens", "INTEGER"))
_SAMPLE_COLUMNS = ("run_id", "profile", "request_index", "task_class", "prompt_tokens", "output_tokens",
                   "prefill_ms", "decode_ms", "wall_ms", "draft_n", "draft_accepted", "vram_bytes",
                   *(name for name, _ in _ADDED_COLUMNS))
def _ensure_schema(conn: sqlite3.Connection) -> None:
    store.ensure_schema(conn, SCHEMA)
    store.add_columns(conn, "bench_samples", _ADDED_COLUMNS)


def save_report(report: Report, unit: str, settings: Settings) -> int:
    """Store a run and its samples in the state DB; returns the run id."""
    conn = store.connect()
    try:
        _ensure_schema(conn)
        summary = {k: v for k, v in report.as_json().items() if k != "cells"}
        config = {k: v for k, v in asdict(settings).items() if k != "deadline"} | {"cache_reuse": report.cache_reuse}
        cursor = conn.execute(
            "INSERT INTO bench_runs (unit, at, workload, profiles, settings, summary) VALUES (?,?,?,?,?,?)",
            (unit, time.time(), report.workload, json.dumps(report.benched()), json.dumps(config),
             json.dumps(summary)))
        run_id = int(cursor.lastrowid or 0)
        rows = [(run_id, r.profile, r.request_index, r.task_class, r.prompt_tokens, r.output_tokens, r.prefill_ms,
                 r.decode_ms, r.wall_ms, r.draft_n, r.draft_accepted, r.vram_bytes, r.concurrency, r.cache_n,
                 r.reasoning_tokens)
                for p in report.benched() for r in report.results[p]]
        conn.executemany(f"INSERT INTO bench_samples ({', '.join(_SAMPLE_COLUMNS)}) "
                         f"VALUES ({', '.join('?' for _ in _SAMPLE_COLUMNS)})", rows)
    finally:
        conn.close()
    report.run_id = run_id
    return run_id
