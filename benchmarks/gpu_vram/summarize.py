"""Errors of specd.gpu.vram against the measured VRAM, held-out and in-sample apart, per architecture.

    summarize.py --models DIR RESULTS.jsonl...      # Markdown on stdout

DIR holds the models' headers (make_models.py model ... --header-only); estimates are recomputed
with the estimator in this tree. The truth is the process tree's VRAM read through pynvml, the larger
of the readings once healthy and after one completion request (nvidia-smi agreed to the MiB).
"Recorded" is the estimate written into the file when the case was measured, by the estimator of
that commit (for held-out groups: before the case was seen). The baseline is a trivial estimate:
the GGUF tensor bytes of model and draft plus the CUDA context.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from cases import Case, blind, family
from measure import baseline_for, estimate_for

GIB = 1024**3


def _measured(record: dict[str, Any]) -> int:
    return max(value for value in (record.get("loaded_nvml"), record.get("idle_nvml"), 0) if value is not None)


def _case(record: dict[str, Any]) -> Case:
    return Case.from_record(record)


def _pct(value: float) -> str:
    return f"{value:+.1f}%"


def rows(paths: list[Path], models: Path) -> list[dict[str, Any]]:
    found = []
    for path in paths:
        for line in path.read_text().splitlines():
            record = json.loads(line) if line.strip() else {}
            if "case" not in record or not _measured(record):
                continue
            case = _case(record)
            estimate = estimate_for(case, models)
            measured = _measured(record)
            found.append({
                "file": path.name, "case": case, "measured": measured,
                "now": (estimate.total_bytes - measured) / measured * 100 if estimate else None,
                "recorded": ((record["estimate"] - measured) / measured * 100) if record.get("estimate") else None,
                "estimator": record.get("estimator", "?"),
                "baseline": (baseline_for(case, models) - measured) / measured * 100,
            })
    return found


def _summary(found: list[dict[str, Any]], key: str, title: str) -> list[str]:
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in found:
        if row[key] is not None:
            groups[family(row["case"])].append(row)
    lines = [f"**{title}**", "", "| architecture | cases | max abs error | mean abs error | range | baseline max abs |",
             "|---|---|---|---|---|---|"]
    for name, members in sorted(groups.items()):
        errors = [row[key] for row in members]
        base = [abs(row["baseline"]) for row in members]
        lines.append(f"| {name} | {len(members)} | {max(map(abs, errors)):.1f}% | "
                     f"{sum(map(abs, errors)) / len(errors):.1f}% | {_pct(min(errors))} .. {_pct(max(errors))} | "
                     f"{max(base):.1f}% |")
    return [*lines, ""]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", type=Path, required=True)
    parser.add_argument("results", type=Path, nargs="+")
    args = parser.parse_args(argv)
    found = rows(args.results, args.models)
    held = [row for row in found if blind(row["case"])]
    seen = [row for row in found if not blind(row["case"])]
    before = [row for row in found if row["case"].group in ("check", "held3", "held4", "held5", "held6", "held7")]
    out = _summary(held, "now", "Held out: the current estimator on cases it was never fitted on or changed for")
    out += _summary(seen, "now", "In-sample: the current estimator on cases its terms were set from (or changed after)")
    out += _summary([{**row, "now": row["recorded"]} for row in before], "now",
                    "Held out at the time: the estimate recorded before each check/held-out case was measured")
    out += ["| file | group | case | measured GiB | error now | held out now | recorded (estimator) | baseline |",
            "|---|---|---|---|---|---|---|---|"]
    for row in found:
        case = row["case"]
        recorded = "-" if row["recorded"] is None else f"{_pct(row['recorded'])} ({row['estimator']})"
        out.append(f"| {row['file']} | {case.group} | {case.name} | {row['measured'] / GIB:.2f} | "
                   f"{_pct(row['now']) if row['now'] is not None else '-'} | {'yes' if blind(case) else 'no'} | "
                   f"{recorded} | {_pct(row['baseline'])} |")
    out += _per_gpu(args.results)
    print("\n".join(out))
    return 0


def _per_gpu(paths: list[Path]) -> list[str]:
    """Two-GPU cases: each GPU's recorded estimate against its own peak reading (NVML index = CUDA index)."""
    lines = []
    for path in paths:
        for line in path.read_text().splitlines():
            record = json.loads(line) if line.strip() else {}
            if "estimate_per_gpu" not in record:
                continue
            peaks: dict[str, int] = {}
            for when in ("idle_by_device", "loaded_by_device"):
                for index, used in record.get(when) or []:
                    peaks[str(index)] = max(peaks.get(str(index), 0), used)
            cells = [f"GPU {index}: {peaks.get(index, 0) / GIB:.2f} GiB, "
                     + (_pct((estimate - peaks[index]) / peaks[index] * 100) if peaks.get(index) else "-")
                     for index, estimate in sorted(record["estimate_per_gpu"].items())]
            lines.append(f"| {path.name} | {record['case']['name']} | {' / '.join(cells)} |")
    if not lines:
        return []
    return ["", "| file | case | per GPU: measured peak, error of the recorded estimate |", "|---|---|---|", *lines]


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
