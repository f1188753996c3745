"""False switches at the margin over the tuner's default looks, with and without the cap on the t
interval's freedom (Kish's effective number of rounds less one, specd.tune.paired.effective_rounds).

A candidate exactly at the margin (ratio 0.95: a switch would be wrong), each request of its own size
(uniform 500-5000 ms), lognormal noise sigma 0.15 on each side, three pairs per round (a restart-mode
bench's rounds), looked at as the default sequential plan looks (n = 10: at 5, 10, 20, 40, 80, 160, 320
pairs, each at 1 - 0.05 / 7). A switch is a "faster" verdict at any look before the first decided one.
The bound the looks must keep: 2.5% (one side of 5%). In-process; the machine does not matter.

Usage: .venv/bin/python benchmarks/looks_false_switch.py [--seeds 1200] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import math
import platform
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path
from unittest import mock

import numpy as np

from specd.tune import paired
from specd.tune.bench import Settings
from specd.tune.paired import comparisons, schedule
from specd.tune.results import Result

REPO = Path(__file__).resolve().parent.parent
PER_ROUND = 3


def rows(walls: list[float], profile: str) -> list[Result]:
    return [Result(profile=profile, request_index=k, task_class="code", prompt_tokens=50, output_tokens=100,
                   prefill_ms=0.1 * w, decode_ms=0.9 * w, wall_ms=w, position=k, round=k // PER_ROUND, box_load=0.0)
            for k, w in enumerate(walls)]


def false_switches(seeds: int) -> tuple[int, dict[int, int]]:
    looks = schedule(10, 5, Settings(n=10).cap)
    at_look: dict[int, int] = {}
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        sizes = rng.uniform(500, 5000, looks.cap)
        plain = [float(s * math.exp(rng.normal(0, 0.15))) for s in sizes]
        fast = [float(s * 0.95 * math.exp(rng.normal(0, 0.15))) for s in sizes]
        run = {"plain": rows(plain, "plain"), "mtp": rows(fast, "mtp")}
        for at in looks.at:
            found = comparisons({p: v[:at] for p, v in run.items()}, "plain", looks.level, 0.05)["mtp"]
            if found.verdict == "faster":
                at_look[at] = at_look.get(at, 0) + 1
            if found.verdict != "unclear":
                break
    return sum(at_look.values()), at_look


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=1200)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    started = time.time()
    capped, capped_at = false_switches(args.seeds)
    with mock.patch.object(paired, "effective_rounds", lambda w, labels, groups: float(len(groups))):
        uncapped, uncapped_at = false_switches(args.seeds)
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip()
    looks = schedule(10, 5, Settings(n=10).cap)
    lines = [
        "# False switches at the margin over the tuner's default looks",
        "",
        f"- command: `.venv/bin/python benchmarks/looks_false_switch.py --seeds {args.seeds}"
        + (f" --out {args.out}`" if args.out else "`"),
        f"- machine: {platform.platform()}, in-process (the machine does not matter); {time.time() - started:.0f} s",
        f"- date: {datetime.fromtimestamp(started, UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}, specd {commit}",
        ("- what: a candidate exactly at the margin (ratio 0.95, so any switch is wrong), requests of uniform "
        "500-5000 ms, lognormal noise sigma 0.15 per side, 3 pairs per round; looks at "
        f"{', '.join(map(str, looks.at))} pairs, each at {looks.level:.2%}. Synthetic: the truth is the "
        "generator's ratio. The bound: 2.5% (one side of alpha = 5%)."),
        "",
        "| t interval's degrees of freedom | false switches | rate | at each look (pairs: switches) |",
        "|---|---|---|---|",
        (f"| capped at Kish's effective rounds - 1 (specd now) | {capped}/{args.seeds} | {capped / args.seeds:.2%} "
        f"| {', '.join(f'{k}: {v}' for k, v in sorted(capped_at.items()))} |"),
        (f"| rounds - 1 (before) | {uncapped}/{args.seeds} | {uncapped / args.seeds:.2%} "
        f"| {', '.join(f'{k}: {v}' for k, v in sorted(uncapped_at.items()))} |"),
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
