"""What clients actually send: one row per proxied request, or sampled llama-server counters.

The tuner weighs profiles by this traffic (prompt and output lengths, task classes, concurrency),
so the rows keep the request's shape and never its content or headers. Two sources:

- the proxy records one `TrafficRecord` per request through a `Recorder`, whose writer thread
  batches inserts so the event loop never waits on SQLite's fsync (specd.traffic.offpath);
- without a proxy, the daemon samples llama-server's `/metrics` counters (`sample_metrics`) and
  stores the raw values; summaries take deltas between consecutive samples, treating a counter
  that went down as a server restart (the Prometheus convention).
"""

from __future__ import annotations

import dataclasses
import logging
import sqlite3
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from specd import store
from specd.errors import HealthError, SpecdError
from specd.traffic.offpath import OffPathWriter

log = logging.getLogger(__name__)

SCHEMA = """
CREATE TABLE IF NOT EXISTS traffic (
  id INTEGER PRIMARY KEY,
  ts REAL NOT NULL,
  unit TEXT NOT NULL DEFAULT '',
  endpoint TEXT NOT NULL,
  stream INTEGER NOT NULL,
  status INTEGER NOT NULL,
  profile TEXT,
  task_class TEXT,
  in_flight INTEGER NOT NULL DEFAULT 0,
  prompt_tokens INTEGER,
  completion_tokens INTEGER,
  ttft_ms REAL,
  total_ms REAL NOT NULL,
  held_ms REAL NOT NULL DEFAULT 0,
  prompt_n INTEGER,
  prompt_ms REAL,
  predicted_n INTEGER,
  predicted_ms REAL,
  draft_n INTEGER,
  draft_n_accepted INTEGER,
  error TEXT,
  sampling TEXT,
  conversation TEXT,
  turn INTEGER NOT NULL DEFAULT 1,
  shape_unknown TEXT
);
CREATE INDEX IF NOT EXISTS traffic_ts ON traffic(ts);
CREATE TABLE IF NOT EXISTS traffic_metrics_samples (
  id INTEGER PRIMARY KEY,
  ts REAL NOT NULL,
  unit TEXT NOT NULL DEFAULT '',
  profile TEXT,
  prompt_tokens REAL,
  predicted_tokens REAL,
  prompt_seconds REAL,
  predicted_seconds REAL,
  draft_tokens REAL,
  accepted_tokens REAL
);
CREATE INDEX IF NOT EXISTS traffic_metrics_samples_ts ON traffic_metrics_samples(ts);
"""

# Token-length buckets: powers of two, so a 32k-context deployment needs a dozen rows.
BUCKET_EDGES: tuple[int, ...] = (0, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)

# llama-server counter -> sample column. Names with and without the `llamacpp:` prefix are accepted.
_COUNTERS: dict[str, str] = {
    "prompt_tokens_total": "prompt_tokens",
    "tokens_predicted_total": "predicted_tokens",
    "prompt_seconds_total": "prompt_seconds",
    "tokens_predicted_seconds_total": "predicted_seconds",
    "spec_decode_num_draft_tokens_total": "draft_tokens",
    "spec_decode_num_accepted_tokens_total": "accepted_tokens",
}
SAMPLE_COLUMNS: tuple[str, ...] = tuple(_COUNTERS.values())


@dataclass(frozen=True)
class TrafficRecord:
    """One proxied request. Every llama-server figure is optional: builds and forks differ."""

    ts: float
    endpoint: str
    stream: bool
    status: int
    total_ms: float
    unit: str = ""
    profile: str | None = None
    task_class: str | None = None
    in_flight: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    ttft_ms: float | None = None
    held_ms: float = 0.0
    prompt_n: int | None = None
    prompt_ms: float | None = None
    predicted_n: int | None = None
    predicted_ms: float | None = None
    draft_n: int | None = None
    draft_n_accepted: int | None = None
    error: str | None = None
    sampling: str | None = None  # specd.traffic.shape.RequestShape: the sampling keys sent, as JSON
    conversation: str | None = None  # ... a hash of the conversation's opening
    turn: int = 1  # ... user messages so far
    shape_unknown: str | None = None  # ... why the body's shape could not be read (None: it was)


# Columns added after the first release: added to older databases on first use.
_ADDED_COLUMNS = (("sampling", "TEXT"), ("conversation", "TEXT"), ("turn", "INTEGER NOT NULL DEFAULT 1"),
                  ("shape_unknown", "TEXT"))
_RECORD_FIELDS = tuple(f.name for f in dataclasses.fields(TrafficRecord))
_INSERT = (
    f"INSERT INTO traffic ({', '.join(_RECORD_FIELDS)}) "
    f"VALUES ({', '.join('?' for _ in _RECORD_FIELDS)})"
)


def open_db(db_path: Path | None = None) -> sqlite3.Connection:
    conn = store.connect(db_path)
    store.ensure_schema(conn, SCHEMA)
    store.add_columns(conn, "traffic", _ADDED_COLUMNS)
    return conn


def insert_records(conn: sqlite3.Connection, records: Iterable[TrafficRecord]) -> int:
    rows = [dataclasses.astuple(r) for r in records]
    if rows:
        conn.execute("BEGIN")
        try:
            conn.executemany(_INSERT, rows)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    return len(rows)


def fetch_records(conn: sqlite3.Connection, since: float, unit: str | None = None) -> list[TrafficRecord]:
    sql = f"SELECT {', '.join(_RECORD_FIELDS)} FROM traffic WHERE ts >= ?"
    params: list[Any] = [since]
    if unit is not None:
        sql += " AND unit = ?"
        params.append(unit)
    rows = conn.execute(sql + " ORDER BY ts", params).fetchall()
    return [TrafficRecord(**{**dict(row), "stream": bool(row["stream"])}) for row in rows]


def prune(conn: sqlite3.Connection, older_than: float) -> int:
    """Housekeeping: drop rows and samples older than `older_than` (a unix time)."""
    removed = conn.execute("DELETE FROM traffic WHERE ts < ?", (older_than,)).rowcount
    removed += conn.execute("DELETE FROM traffic_metrics_samples WHERE ts < ?", (older_than,)).rowcount
    return int(removed)


class Recorder(OffPathWriter[TrafficRecord]):
    """The proxy's traffic rows, written by one thread in batches (specd.traffic.offpath) so the
    event loop never waits on SQLite's fsync; `close` writes what is pending."""

    def __init__(self, db_path: Path | None = None, *, max_pending: int = 100_000,
                 interval_s: float = 0.5) -> None:
        super().__init__("specd-traffic-writer", max_pending=max_pending, interval_s=interval_s)
        self._db_path = db_path
        self._conn: sqlite3.Connection | None = None
        self._identity: tuple[int, int] | None = None
        open_db(db_path).close()  # fail early (bad DB) in the caller, not in the thread
        self.start()

    def record(self, record: TrafficRecord) -> None:
        self.submit(record)

    def _open(self) -> None:
        self._conn = open_db(self._db_path)
        self._conn.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable at checkpoints, cheap
        self._identity = store.file_identity(self._db_path)

    def _write_batch(self, batch: list[TrafficRecord]) -> int:
        assert self._conn is not None
        if store.file_identity(self._db_path) != self._identity:
            self._reopen()  # the state file was deleted or replaced: write into the new one
        return insert_records(self._conn, batch)

    def _reopen(self) -> None:
        stale = self._conn
        try:
            self._open()
        except SpecdError as exc:
            log.warning("cannot reopen the state database for traffic records: %s", exc)
            self._conn = stale
            return
        if stale is not None:
            stale.close()

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()


# ---- metrics sampling: the traffic source when there is no proxy ----------------------------


def parse_counters(text: str) -> dict[str, float]:
    """The llama-server counters specd uses, from Prometheus text; unknown lines are ignored."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) < 2:
            continue
        name = parts[0].split("{", 1)[0].removeprefix("llamacpp:")
        column = _COUNTERS.get(name)
        if column is None:
            continue
        try:
            values[column] = float(parts[1])
        except ValueError:
            continue
    return values


def sample_metrics(client: httpx.Client, base_url: str) -> dict[str, float]:
    """Read llama-server's `/metrics` (it needs `--metrics`); HealthError when it cannot."""
    try:
        response = client.get(f"{base_url.rstrip('/')}/metrics", timeout=5.0)
    except httpx.HTTPError as exc:
        raise HealthError(f"cannot read {base_url}/metrics: {exc}") from exc
    if response.status_code != 200:
        raise HealthError(
            f"{base_url}/metrics answered {response.status_code}",
            hint="llama-server serves /metrics only with --metrics; or enable [proxy] in specd.toml",
        )
    return parse_counters(response.text)


def record_sample(
    conn: sqlite3.Connection, counters: dict[str, float], *, unit: str = "", profile: str | None = None,
    ts: float | None = None,
) -> None:
    columns = ("ts", "unit", "profile", *SAMPLE_COLUMNS)
    values = (time.time() if ts is None else ts, unit, profile, *(counters.get(c) for c in SAMPLE_COLUMNS))
    conn.execute(
        f"INSERT INTO traffic_metrics_samples ({', '.join(columns)}) "
        f"VALUES ({', '.join('?' for _ in columns)})",
        values,
    )


@dataclass
class CounterTotals:
    """Counter increases over a window, per profile (a drop is a restart: count from zero)."""

    by_profile: dict[str, dict[str, float]] = field(default_factory=dict)

    def add(self, profile: str, column: str, delta: float) -> None:
        totals = self.by_profile.setdefault(profile, dict.fromkeys(SAMPLE_COLUMNS, 0.0))
        totals[column] += delta


def counter_totals(conn: sqlite3.Connection, since: float, unit: str | None = None) -> CounterTotals:
    sql = "SELECT * FROM traffic_metrics_samples WHERE ts >= ?"
    params: list[Any] = [since]
    if unit is not None:
        sql += " AND unit = ?"
        params.append(unit)
    totals = CounterTotals()
    previous: dict[str, sqlite3.Row] = {}
    for row in conn.execute(sql + " ORDER BY unit, ts", params):
        before = previous.get(row["unit"])
        previous[row["unit"]] = row
        if before is None:
            continue
        for column in SAMPLE_COLUMNS:
            now, then = row[column], before[column]
            if now is None:
                continue
            delta = now if then is None or now < then else now - then
            totals.add(row["profile"] or "unknown", column, delta)
    return totals


# ---- summaries ---------------------------------------------------------------------------------


def histogram(values: Iterable[int], edges: tuple[int, ...] = BUCKET_EDGES) -> list[dict[str, int | None]]:
    """Counts per [lo, hi) bucket; the last bucket is open (`hi` is None)."""
    counts = [0] * len(edges)
    for value in values:
        index = 0
        while index + 1 < len(edges) and value >= edges[index + 1]:
            index += 1
        counts[index] += 1
    return [
        {"lo": lo, "hi": edges[i + 1] if i + 1 < len(edges) else None, "count": counts[i]}
        for i, lo in enumerate(edges)
    ]


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def prompt_length(record: TrafficRecord) -> int | None:
    return record.prompt_tokens if record.prompt_tokens is not None else record.prompt_n


def output_length(record: TrafficRecord) -> int | None:
    return record.completion_tokens if record.completion_tokens is not None else record.predicted_n


def summarize(
    conn: sqlite3.Connection, since: float, *, unit: str | None = None, until: float | None = None
) -> dict[str, Any]:
    """The `specd traffic --json` document: what the proxy saw, and what counters say without one."""
    records = fetch_records(conn, since, unit)
    if until is not None:
        records = [r for r in records if r.ts < until]
    ok = [r for r in records if 200 <= r.status < 300]
    class_mix: dict[str, int] = {}
    concurrency: dict[str, int] = {}
    acceptance: dict[str, dict[str, Any]] = {}
    for r in records:
        concurrency[str(r.in_flight)] = concurrency.get(str(r.in_flight), 0) + 1
    for r in ok:
        if r.task_class:
            class_mix[r.task_class] = class_mix.get(r.task_class, 0) + 1
        entry = acceptance.setdefault(r.profile or "unknown", {
            "requests": 0, "draft_n": 0, "draft_n_accepted": 0, "predicted_n": 0, "predicted_ms": 0.0,
        })
        entry["requests"] += 1
        entry["draft_n"] += r.draft_n or 0
        entry["draft_n_accepted"] += r.draft_n_accepted or 0
        if r.predicted_n and r.predicted_ms:
            entry["predicted_n"] += r.predicted_n
            entry["predicted_ms"] += r.predicted_ms
    for entry in acceptance.values():
        entry["rate"] = entry["draft_n_accepted"] / entry["draft_n"] if entry["draft_n"] else None
        entry["decode_tok_s"] = (
            1000.0 * entry["predicted_n"] / entry["predicted_ms"] if entry["predicted_ms"] else None
        )
    counters = counter_totals(conn, since, unit)
    sampled = {
        profile: {
            **totals,
            "acceptance_rate": (totals["accepted_tokens"] / totals["draft_tokens"]
                                if totals["draft_tokens"] else None),
        }
        for profile, totals in counters.by_profile.items()
    }
    prompts = [n for r in ok if (n := prompt_length(r)) is not None]
    outputs = [n for r in ok if (n := output_length(r)) is not None]
    ttfts = [r.ttft_ms for r in ok if r.ttft_ms is not None]
    return {
        "since": since,
        "until": until if until is not None else time.time(),
        "unit": unit,
        "requests": len(records),
        "succeeded": len(ok),
        "failed": len(records) - len(ok),
        "streamed": sum(1 for r in records if r.stream),
        "by_endpoint": _count(r.endpoint for r in records),
        "prompt_tokens_hist": histogram(prompts),
        "output_tokens_hist": histogram(outputs),
        "class_mix": class_mix,
        "concurrency_at_start": concurrency,
        "acceptance": acceptance,
        "ttft_ms": {"p50": percentile(ttfts, 0.5), "p95": percentile(ttfts, 0.95)},
        "held_ms_max": max((r.held_ms for r in records), default=0.0),
        "sampled_counters": sampled,
    }


def _count(items: Iterable[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for item in items:
        counts[item] = counts.get(item, 0) + 1
    return counts
