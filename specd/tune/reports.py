"""Bench runs read back from the state DB (`bench.save_report` writes them): the status page
shows the last one per unit with the same medians, intervals and crossovers the tuner used."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from specd import store
from specd.tune.bench import Report, Result


@dataclass(frozen=True)
class StoredRun:
    run_id: int
    unit: str
    at: float
    report: Report
    summary: dict[str, Any]


def _has_tables(conn: sqlite3.Connection) -> bool:
    names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    return {"bench_runs", "bench_samples"} <= names


def last_run(unit: str) -> StoredRun | None:
    """The newest bench run of `unit`, rebuilt as the Report it was; None when it never ran."""
    conn = store.connect()
    try:
        if not _has_tables(conn):
            return None
        row = conn.execute("SELECT * FROM bench_runs WHERE unit=? ORDER BY id DESC LIMIT 1", (unit,)).fetchone()
        if row is None:
            return None
        samples = conn.execute("SELECT * FROM bench_samples WHERE run_id=? ORDER BY profile, request_index",
                               (row["id"],)).fetchall()
    finally:
        conn.close()
    summary: dict[str, Any] = json.loads(row["summary"])
    profiles = [str(p) for p in json.loads(row["profiles"])]
    report = Report(workload=str(row["workload"]), profiles=profiles, run_id=int(row["id"]),
                    elapsed_s=float(summary.get("elapsed_s", 0.0)), notes=list(summary.get("notes", [])),
                    concurrency=int(summary.get("concurrency", 1)))
    for sample in samples:
        data = dict(sample)
        report.results.setdefault(data["profile"], []).append(Result(
            profile=data["profile"], request_index=data["request_index"], task_class=data["task_class"],
            prompt_tokens=data["prompt_tokens"], output_tokens=data["output_tokens"], prefill_ms=data["prefill_ms"],
            decode_ms=data["decode_ms"], wall_ms=data["wall_ms"], draft_n=data["draft_n"],
            draft_accepted=data["draft_accepted"], vram_bytes=data["vram_bytes"],
            concurrency=data.get("concurrency") or 1, cache_n=data.get("cache_n") or 0,
            reasoning_tokens=data.get("reasoning_tokens")))
    return StoredRun(int(row["id"]), unit, float(row["at"]), report, summary)


__all__ = ["StoredRun", "last_run"]
