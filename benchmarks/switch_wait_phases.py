"""When in a switch the clients waited: the requests of a switch-wait run's blue-green switches,
grouped by the tenth of the switch they were sent in, against the run's own baseline.

    .venv/bin/python benchmarks/switch_wait_phases.py RUN.json [RUN.json ...]

A request is in a switch when its life overlaps the `specd switch` command's (as in
switch_wait.py); its tenth is (sent - switch start) / switch duration, "before" when it was sent
before the switch began. The baseline is the same run's requests at least `settle` seconds away
from every switch. Prints one Markdown table per run: requests, median TTFT minus the baseline's
median, and the worst TTFT, per tenth.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any


def phases(run: dict[str, Any]) -> tuple[float, float, dict[int, list[float]]]:
    settle = float(run["settle"])
    switches = [s for s in run["switches"] if s["strategy"] == "blue-green"]
    baseline = [r["ttft_ms"] for r in run["requests"] if r["ok"] and r["ttft_ms"] is not None and all(
        r["end"] < s["start"] - settle or r["sent"] > s["end"] + settle for s in run["switches"])]
    tenths: dict[int, list[float]] = {}
    for request in run["requests"]:
        if request["ttft_ms"] is None:
            continue
        for switch in switches:
            if request["sent"] < switch["end"] and request["end"] > switch["start"]:
                share = (request["sent"] - switch["start"]) / (switch["end"] - switch["start"])
                tenths.setdefault(min(9, max(-1, int(share * 10))), []).append(request["ttft_ms"])
    return statistics.median(baseline), max(baseline), tenths


def main(paths: list[str]) -> None:
    for path in paths:
        median, worst, tenths = phases(json.loads(Path(path).read_text()))
        print(f"## {path}\n\nbaseline TTFT median {median:.1f} ms, worst {worst:.1f} ms\n")
        print("| tenth of the switch | requests | median TTFT minus the baseline's, ms | worst TTFT ms |")
        print("|---|---|---|---|")
        for tenth in sorted(tenths):
            values = tenths[tenth]
            name = "before" if tenth < 0 else f"{tenth / 10:.1f}-{(tenth + 1) / 10:.1f}"
            print(f"| {name} | {len(values)} | {statistics.median(values) - median:+.1f} | {max(values):.1f} |")
        print()


if __name__ == "__main__":
    main(sys.argv[1:])
