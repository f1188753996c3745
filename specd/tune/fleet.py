"""Tuner verdicts from several boxes, side by side.

`specd tune --json` writes one document per run (schema `TUNE_SCHEMA`: the decision, the box's
identity and hardware, the deployment, the model file of each candidate). `specd tune-table`
reads such files — one per box, gathered by hand or by the collection's `tune_report` playbook —
checks that each is that schema and prints one row per box and profile, so boxes that share a
model can be compared (the same profile faster on the 4090 than on the 3090?).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specd.errors import UsageError

TUNE_SCHEMA = "specd.tune/1"
GIB = 1024**3


@dataclass(frozen=True)
class TuneRow:
    """One profile's estimate on one box: what `specd tune-table` prints per line."""

    box: str
    hardware: str
    deployment: str
    workload: str
    profile: str
    model: str | None
    n: int
    median_ms: float | None  # None: the profile was asked for but has no estimate; `verdict` says why
    ci_lo_ms: float | None
    ci_hi_ms: float | None
    best: bool
    active_after: bool
    verdict: str


def hardware_line(hardware: dict[str, Any]) -> str:
    """'16 CPUs, 62 GiB; RTX 3090 Ti 24 GiB' — short enough for a table cell."""
    text = f"{hardware['cpu_count']} CPUs, {hardware['memory_bytes'] / GIB:.0f} GiB"
    gpus = hardware.get("gpus") or []
    if gpus:
        text += "; " + ", ".join(f"{g['name']} {g['total_bytes'] / GIB:.0f} GiB" for g in gpus)
    else:
        text += "; no GPU"
    return text


def _field(document: dict[str, Any], key: str, source: str) -> Any:
    if key not in document:
        raise UsageError(f"{source}: no '{key}' in the tune report (was it written by `specd tune --json`?)")
    return document[key]


def rows_of(document: dict[str, Any], source: str) -> list[TuneRow]:
    """The rows of one `specd tune --json` document; UsageError naming the file when it is not one."""
    schema = document.get("schema") if isinstance(document, dict) else None
    if schema != TUNE_SCHEMA:
        raise UsageError(f"{source}: schema is {schema!r}, expected {TUNE_SCHEMA!r}",
                         hint="write it with `specd tune --json` of this specd version")
    box = _field(document, "box", source)
    hardware = hardware_line(_field(box, "hardware", source))
    deployment = _field(document, "deployment", source)
    estimates: dict[str, dict[str, Any]] = _field(document, "estimates", source)
    models: dict[str, str | None] = document.get("models") or {}
    left_out: dict[str, str] = document.get("left_out") or {}
    best = document.get("best")
    final = document.get("final_profile")
    common = {"box": str(box["name"]), "hardware": hardware, "deployment": str(deployment["unit"]),
              "workload": str(document.get("workload") or "")}
    measured = [TuneRow(**common, profile=profile, model=models.get(profile),
                        n=int(est["n"]), median_ms=float(est["median_ms"]), ci_lo_ms=float(est["ci_lo_ms"]),
                        ci_hi_ms=float(est["ci_hi_ms"]), best=profile == best, active_after=profile == final,
                        verdict=str(document.get("reason") or ""))
                for profile, est in estimates.items()]
    unmeasured = [TuneRow(**common, profile=profile, model=models.get(profile), n=0, median_ms=None, ci_lo_ms=None,
                          ci_hi_ms=None, best=False, active_after=profile == final, verdict=str(why))
                  for profile, why in left_out.items()]
    return measured + unmeasured


def load_rows(files: list[Path]) -> list[TuneRow]:
    """Every row of every file, sorted by box, then median wall clock."""
    rows: list[TuneRow] = []
    for path in files:
        try:
            document = json.loads(path.read_text())
        except OSError as exc:
            raise UsageError(f"{path}: cannot read it: {exc.strerror}") from exc
        except json.JSONDecodeError as exc:
            raise UsageError(f"{path} line {exc.lineno}: not JSON: {exc.msg}") from exc
        rows.extend(rows_of(document, str(path)))
    return sorted(rows, key=lambda row: (row.box, row.deployment, row.median_ms is None, row.median_ms or 0.0))
