"""The tuner's picks on the emulator's performance model, next to two baselines — a CIRCULAR figure.

Runs on the emulator's performance model in-process (specd.tune.bench.ModelTarget, the seeds'
3090 Ti tables, 3% lognormal noise): for every scenario (task class x prompt length x output
length) the tuner benches plain / MTP / DFlash with early stopping and decides; the "truth" is the
noise-free modelled wall clock of every profile. That truth is the very model the tuner's samples
are drawn from (and the tuner's own perf model is fitted to such samples), so this measures only
how well the tuner's statistics see through 3% noise — not whether it picks right on a real box.
For a truth that is independent of the tuner, see benchmarks/tuner_accuracy_real.py.

Scores, on the same scenarios: the tuner; always plain; always the profile fastest on average over
all scenarios (chosen with the truth). "Right" = the pick is the modelled best; "within margin" =
its modelled wall clock is within the tuner's margin of the best's.

    .venv/bin/python benchmarks/tuner_accuracy.py [--seeds 5] [--n 10] [--margin 0.05] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import platform
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from specd.emulator.model import expected_wall_ms, load_model
from specd.tune.bench import ModelTarget, Settings
from specd.tune.tuner import tune
from specd.tune.workloads import Workload, WorkloadRequest, filler_text

REPO = Path(__file__).resolve().parent.parent
ASKS = {
    "code": "Write a Python function that parses these ledger entries into a list of dicts.",
    "factual": "How many entries does the ledger contain?",
    "analysis": "Analyse the ledger and explain why stock levels vary; compare the early and late entries.",
    "creative": "Write a short story about the night shift at this depot.",
}
MODES = {"plain": "none", "mtp": "mtp", "dflash": "dflash"}
PROMPTS = (500, 8192, 43000)
OUTPUTS = (100, 300, 1000, 2000)


def workload(task: str, prompt: int, output: int) -> Workload:
    requests = tuple(WorkloadRequest(
        body={"messages": [{"role": "system", "content": filler_text(prompt, seed)},
                           {"role": "user", "content": ASKS[task]}], "max_tokens": output},
        task_class=task) for seed in range(4))  # type: ignore[arg-type]
    return Workload(f"{task}-{prompt}-{output}", requests)


class Tally:
    def __init__(self) -> None:
        self.total = self.right = self.within = 0
        self.regret = 0.0

    def add(self, pick: str, truth: dict[str, float], margin: float) -> None:
        best = min(truth, key=truth.__getitem__)
        self.total += 1
        self.right += pick == best
        self.within += truth[pick] <= truth[best] * (1 + margin)
        self.regret += truth[pick] / truth[best] - 1.0

    def row(self, who: str) -> str:
        return (f"| {who} | {self.right}/{self.total} ({self.right / self.total:.0%}) | "
                f"{self.within / self.total:.0%} | {self.regret / self.total:+.1%} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--n", type=int, default=10)
    parser.add_argument("--margin", type=float, default=0.05)
    parser.add_argument("--out", type=Path, help="also write the report to this markdown file")
    args = parser.parse_args()
    model = load_model()
    scenarios = list(itertools.product(ASKS, PROMPTS, OUTPUTS))
    truths = {s: {name: expected_wall_ms(model.mode(mode), s[1], s[2], s[0])  # type: ignore[arg-type]
                  for name, mode in MODES.items()} for s in scenarios}
    geomean = {name: math.exp(sum(math.log(t[name] / min(t.values())) for t in truths.values()) / len(truths))
               for name in MODES}
    fastest = min(geomean, key=geomean.__getitem__)
    tuner, plain, fixed = Tally(), Tally(), Tally()
    switches = 0
    bench_s = 0.0
    lines = ["| scenario | modelled best | tuner picks (per seed) | bench min per tune |", "|---|---|---|---|"]
    for scenario in scenarios:
        task, prompt, output = scenario
        truth = truths[scenario]
        picks, spent = [], 0.0
        for seed in range(args.seeds):
            target = ModelTarget(model, MODES, seed=seed, active="plain")
            result = tune(target, list(MODES), workload(task, prompt, output), Settings(n=args.n), margin=args.margin)
            decision = result.decision
            chosen = decision.best if decision.switch and decision.best else "plain"
            picks.append(chosen)
            tuner.add(chosen, truth, args.margin)
            plain.add("plain", truth, args.margin)
            fixed.add(fastest, truth, args.margin)
            switches += decision.switch
            spent += sum(r.wall_ms for rs in result.report.results.values() for r in rs) / 1000.0
        bench_s += spent
        lines.append(f"| {task} {prompt}/{output} | {min(truth, key=truth.__getitem__)} | {', '.join(picks)} | "
                     f"{spent / args.seeds / 60:.1f} |")
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip()
    report = [
        "# Tuner picks on the emulator's performance model (CIRCULAR: the truth is the model the samples come from)",
        "",
        f"- command: `{' '.join(['.venv/bin/python', 'benchmarks/tuner_accuracy.py', *sys.argv[1:]])}`",
        (f"- machine: {platform.platform()}, {os.cpu_count()} CPUs (in-process, no server: the machine does not "
        "matter)"),
        f"- date: {datetime.now(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}, specd {commit}",
        ("- what it measures: whether the tuner's interleaved medians, CIs and early stopping find the best "
        "profile through 3% lognormal noise. The truth is the noise-free wall clock of specd's emulator model "
        "(the seeds' 3090 Ti tables), the same model that generates every sample the tuner sees: in-sample and "
        "circular. It says nothing about a real server; see "
        "[tuner-accuracy-real.md](tuner-accuracy-real.md) for a truth the tuner never sees."),
        (f"- {len(scenarios)} scenarios x {args.seeds} seeds = {tuner.total} tuner runs; n = {args.n}, "
        f"margin = {args.margin}; the box starts on plain"),
        "",
        f"| who picks | = modelled best | within the {args.margin:.0%} margin of it | mean regret |",
        "|---|---|---|---|",
        tuner.row("tuner"),
        plain.row("always plain"),
        fixed.row(f"always {fastest} (fastest on average, chosen with the truth)"),
        "",
        f"Tuner switched {switches} times; modelled bench time {bench_s / tuner.total / 60:.1f} min per tune.",
        "",
        *lines,
        "",
    ]
    text = "\n".join(report)
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
