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
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from cases import Case, blind, family
from measure import baseline_for, estimate_for, estimate_per_gpu_for, settings_for

from specd.gpu.check import margin_for
from specd.gpu.compute import CUDA_CONTEXT
from specd.gpu.gguf import read_gguf_info
from specd.gpu.placement import place_layers

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
            if "case" not in record or not _measured(record) or "estimate_per_gpu" in record:
                continue                     # two-GPU cases: per GPU, below
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
    parser.add_argument("--server", type=Path, default=Path("llama-server"),
                        help="the llama-server the runs used (whether it brings NCCL; unreadable: it does)")
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
    out += _per_gpu(args.results, args.models, args.server)
    print("\n".join(out))
    return 0


_FREE = re.compile(r"GPU (\d+) [^:;]+: ([\d.]+) of")


def _free(record: dict[str, Any]) -> tuple[int, ...]:
    """Each GPU's free memory when the run started, as the record's `gpu` line gives it (0.1 GiB)."""
    found = sorted((int(index), float(gib)) for index, gib in _FREE.findall(record.get("gpu", "")))
    return tuple(int(gib * GIB) for _, gib in found)


def _baseline(case: Case, models: Path, free: tuple[int, ...]) -> dict[int, int]:
    """A trivial per-GPU estimate: each model's GGUF tensor bytes cut by its GPUs' shares, plus a
    CUDA context on every GPU used."""
    settings = settings_for(case, models, Path("llama-server"))
    found: dict[int, int] = {}
    for name, devices in ((case.model, settings.devices), (case.draft, settings.draft_devices)):
        if not name:
            continue
        info = read_gguf_info(models / f"{name}.gguf")
        placement = place_layers(info.block_count or 1, None, settings, len(free), free, devices=devices)
        for device, share in zip(placement.devices, placement.shares, strict=True):
            found[device] = found.get(device, CUDA_CONTEXT) + int(info.tensor_bytes * share)
    return found


def two_gpu_rows(paths: list[Path], models: Path, server: Path) -> list[dict[str, Any]]:
    """Each GPU of each two-GPU case: measured peak, the recorded and the current estimate, the
    current estimate with the fit check's margin, the trivial baseline (NVML index = CUDA index)."""
    found = []
    for path in paths:
        for line in path.read_text().splitlines():
            record = json.loads(line) if line.strip() else {}
            if "estimate_per_gpu" not in record or not record.get("ok"):
                continue
            case, free = _case(record), _free(record)
            now = estimate_per_gpu_for(case, models, free, server)
            margin = margin_for(settings_for(case, models, server), read_gguf_info(models / f"{case.model}.gguf"),
                                len(free))
            baseline = _baseline(case, models, free)
            peaks: dict[int, int] = {}
            for when in ("idle_by_device", "loaded_by_device"):
                for index, used in record.get(when) or []:
                    peaks[int(index)] = max(peaks.get(int(index), 0), used)
            for index, measured in sorted(peaks.items()):
                estimate = now[index].total_bytes if index in now else 0
                recorded = record["estimate_per_gpu"].get(str(index))
                then = record.get("split_margin")          # the margin in force when it was measured
                found.append({
                    "file": path.name, "case": case, "gpu": index, "measured": measured,
                    "regime": margin.label if margin else "one model per GPU (-sm none, a draft on GPU 1)",
                    "recorded": None if recorded is None else (recorded - measured) / measured * 100,
                    "recorded_after": None if recorded is None or then is None
                    else (recorded * (1 + then) - measured) / measured * 100,
                    "estimator": record.get("estimator", "?")[:7],
                    "now": (estimate - measured) / measured * 100,
                    "margin": margin.fraction if margin else 0.0,
                    "after_margin": (estimate * (1 + (margin.fraction if margin else 0.0)) - measured) / measured * 100,
                    "baseline": (baseline.get(index, CUDA_CONTEXT) - measured) / measured * 100})
    return found


def _two_gpu_summary(rows: list[dict[str, Any]], title: str) -> list[str]:
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[row["regime"]].append(row)
    header = ("| split | GPUs measured (cases) | error now, range | max abs | margin | lowest after the margin | "
              "baseline max abs |")
    lines = [f"**{title}**", "", header, "|---|---|---|---|---|---|---|"]
    for name, members in sorted(groups.items()):
        errors = [row["now"] for row in members]
        lines.append(f"| {name} | {len(members)} ({len({row['case'].name for row in members})}) | "
                     f"{_pct(min(errors))} .. {_pct(max(errors))} | {max(map(abs, errors)):.1f}% | "
                     f"+{members[0]['margin'] * 100:.0f}% | {_pct(min(row['after_margin'] for row in members))} | "
                     f"{max(abs(row['baseline']) for row in members):.1f}% |")
    return [*lines, ""]


def _per_gpu(paths: list[Path], models: Path, server: Path) -> list[str]:
    rows = two_gpu_rows(paths, models, server)
    if not rows:
        return []
    out = ["", *_two_gpu_summary([row for row in rows if blind(row["case"])],
                                 "Two GPUs, held out: per-GPU error of the current estimator"),
           *_two_gpu_summary([row for row in rows if not blind(row["case"])],
                             "Two GPUs, in-sample: per-GPU error of the current estimator"),
           ("| file | case | held out | GPU | measured GiB | recorded (estimator) | recorded + its margin | now | "
           "now + margin | baseline |"), "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        recorded = "-" if row["recorded"] is None else f"{_pct(row['recorded'])} ({row['estimator']})"
        then = "-" if row["recorded_after"] is None else _pct(row["recorded_after"])
        out.append(f"| {row['file']} | {row['case'].name} | {'yes' if blind(row['case']) else 'no'} | {row['gpu']} | "
                   f"{row['measured'] / GIB:.2f} | {recorded} | {then} | {_pct(row['now'])} | "
                   f"{_pct(row['after_margin'])} | {_pct(row['baseline'])} |")
    refused = [(path.name, json.loads(line)) for path in paths for line in path.read_text().splitlines()
               if line.strip() and "split_probe" in line]
    refused = [(name, record) for name, record in refused if record.get("split_probe") and not record.get("ok")]
    if refused:
        out += ["", "| file | case | specd's probe before the run | the server's own load |", "|---|---|---|---|"]
        for name, record in refused:
            probe = record["split_probe"]
            tail = next((line.split("error loading model:", 1)[1].strip() for line in record.get("log_tail", [])
                         if "error loading model:" in line), record.get("error", "?"))
            out.append(f"| {name} | {record['case']['name']} | {probe['verdict']}: {probe['said']} | "
                       f"failed: {tail} |")
    return out


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
