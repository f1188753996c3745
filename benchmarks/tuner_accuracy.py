"""The tuner's picks on the emulator's performance model, next to baselines — a CIRCULAR figure.

Runs on the emulator's performance model in-process (specd.tune.bench.ModelTarget, the seeds'
3090 Ti tables, 3% lognormal noise): for each of `--mixes` workloads — a random mix of requests
(task class, prompt length and output length drawn per request from the grids below, a fresh draw
per mix) — the tuner benches plain / MTP / DFlash the way `specd tune` does (paired sequential
sampling, the [tuner] defaults, the box starting on plain) and decides. The "truth" of a mix is the
noise-free modelled wall clock of every profile summed over the mix's requests. That truth is the
very model the tuner's samples are drawn from: this measures only how well the tuner's statistics
see through the noise — not whether it picks right on a real box (benchmarks/tuner_accuracy_real.py).

Scored per mix: right = the pick's modelled total is within the margin of the best's (a profile
that much faster is what a switch must buy); = best = the pick is the modelled best; regret =
truth(pick) / truth(best) - 1; a bad switch = a switch to a profile more than the margin slower than
plain. The tuner before issue 31 (its bench with early stopping, and its rule: benchmarks/legacy_rule.py)
runs on the same mixes with the same noise seeds, and two baselines need no tuner: always plain, and always the one
profile fastest on average over the mixes (chosen with the truth). Then the no-difference case:
`--null-runs` tunes between two identical profiles (both plain, independent noise), counting switches.

    .venv/bin/python benchmarks/tuner_accuracy.py [--mixes 240] [--null-runs 500] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import random
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from legacy_rule import legacy_pick

from specd.emulator.model import EmulatorModel, expected_wall_ms, load_model
from specd.profiles.config import TunerConfig
from specd.tune.bench import ModelTarget, Settings, bench_profiles
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
PROMPTS = (500, 2000, 8192, 20000, 43000)
OUTPUTS = (100, 300, 1000, 2000)
REQUESTS_PER_MIX = (2, 6)  # a mix has this many distinct requests, at least and at most


@dataclass(frozen=True)
class Shape:
    task: str
    prompt: int
    output: int


def draw_mix(rng: random.Random) -> list[Shape]:
    """A workload's requests: one task class or several, prompt and output lengths per request."""
    tasks = rng.sample(sorted(ASKS), rng.choice((1, 1, 2, 3)))
    count = rng.randint(*REQUESTS_PER_MIX)
    return [Shape(rng.choice(tasks), rng.choice(PROMPTS), rng.choice(OUTPUTS)) for _ in range(count)]


def workload(name: str, shapes: list[Shape], seed: int) -> Workload:
    return Workload(name, tuple(WorkloadRequest(
        body={"messages": [{"role": "system", "content": filler_text(s.prompt, seed * 100 + k)},
                           {"role": "user", "content": ASKS[s.task]}], "max_tokens": s.output},
        task_class=s.task) for k, s in enumerate(shapes)))  # type: ignore[arg-type]


def truth_of(model: EmulatorModel, shapes: list[Shape], modes: dict[str, str]) -> dict[str, float]:
    return {name: sum(expected_wall_ms(model.mode(mode), s.prompt, s.output, s.task)  # type: ignore[arg-type]
                      for s in shapes) for name, mode in modes.items()}


@dataclass
class Tally:
    margin: float
    total: int = 0
    right: int = 0
    exact: int = 0
    regret: float = 0.0
    worst: float = 0.0
    switches: int = 0
    bad_switches: int = 0

    def add(self, pick: str, truth: dict[str, float]) -> None:
        best = min(truth, key=truth.__getitem__)
        regret = truth[pick] / truth[best] - 1.0
        self.total += 1
        self.right += regret <= self.margin
        self.exact += pick == best
        self.regret += regret
        self.worst = max(self.worst, regret)
        self.switches += pick != "plain"
        self.bad_switches += pick != "plain" and truth[pick] > truth["plain"] / (1.0 - self.margin)

    def row(self, who: str) -> str:
        return (f"| {who} | {self.right}/{self.total} ({self.right / self.total:.1%}) | "
                f"{self.exact / self.total:.1%} | {self.regret / self.total:+.2%} | {self.worst:+.1%} | "
                f"{self.switches} | {self.bad_switches} |")


@dataclass
class Outcomes:
    counts: dict[str, int] = field(default_factory=dict)
    samples: list[int] = field(default_factory=list)

    def add(self, outcome: str, spent: int) -> None:
        self.counts[outcome] = self.counts.get(outcome, 0) + 1
        self.samples.append(spent)


def legacy_run(model: EmulatorModel, shapes: list[Shape], number: int, n: int, margin: float) -> str:
    """The tuner before issue 31 on the same mix and noise seed: its bench (n requests, a profile leaving once
    its median's 95% interval is apart from every rival's) and its rule, on the requests all profiles share."""
    target = ModelTarget(model, MODES, seed=number, active="plain")
    report = bench_profiles(target, list(MODES), workload(f"mix-{number}", shapes, number), Settings(n=n))
    common = report.common_n()
    return legacy_pick({p: report.walls(p, common) for p in report.benched()}, "plain", margin)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mixes", type=int, default=240)
    parser.add_argument("--null-runs", type=int, default=500)
    parser.add_argument("--out", type=Path, help="also write the report to this markdown file")
    args = parser.parse_args()
    tuner_config = TunerConfig()
    n, margin = tuner_config.n, tuner_config.margin
    model = load_model()
    started = time.monotonic()
    rng = random.Random(2026)
    mixes = [draw_mix(rng) for _ in range(args.mixes)]
    truths = [truth_of(model, shapes, MODES) for shapes in mixes]
    geomean = {name: math.exp(sum(math.log(t[name] / min(t.values())) for t in truths) / len(truths))
               for name in MODES}
    fastest = min(geomean, key=geomean.__getitem__)
    tuner, legacy, plain, fixed = Tally(margin), Tally(margin), Tally(margin), Tally(margin)
    outcomes = Outcomes()
    misses: list[str] = []
    for number, (shapes, truth) in enumerate(zip(mixes, truths, strict=True)):
        target = ModelTarget(model, MODES, seed=number, active="plain")
        result = tune(target, list(MODES), workload(f"mix-{number}", shapes, number), Settings(n=n),
                      margin=margin)
        decision = result.decision
        pick = decision.best if decision.switch and decision.best else "plain"
        tuner.add(pick, truth)
        legacy.add(legacy_run(model, shapes, number, n, margin), truth)
        plain.add("plain", truth)
        fixed.add(fastest, truth)
        outcomes.add(decision.outcome, sum(decision.samples.values()))
        best = min(truth, key=truth.__getitem__)
        if truth[pick] / truth[best] - 1.0 > margin:
            shape = ", ".join(f"{s.task} {s.prompt}/{s.output}" for s in shapes)
            misses.append(f"- mix {number} ({shape}): picked {pick} ({truth[pick] / truth[best] - 1.0:+.1%}), "
                          f"best {best}; {decision.reason}")
    null_switches = 0
    null_outcomes = Outcomes()
    for seed in range(args.null_runs):
        shapes = draw_mix(random.Random(10_000 + seed))
        twins = ModelTarget(model, {"plain": "none", "plain-twin": "none"}, seed=100_000 + seed, active="plain")
        result = tune(twins, ["plain", "plain-twin"], workload(f"null-{seed}", shapes, seed), Settings(n=n),
                      margin=margin)
        null_switches += result.decision.switch
        null_outcomes.add(result.decision.outcome, sum(result.decision.samples.values()))
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip()
    mean_samples = sum(outcomes.samples) / len(outcomes.samples)
    report = [
        "# Tuner picks on the emulator's performance model (CIRCULAR: the truth is the model the samples come from)",
        "",
        f"- command: `{' '.join(['.venv/bin/python', 'benchmarks/tuner_accuracy.py', *sys.argv[1:]])}`",
        (f"- machine: {platform.platform()}, {os.cpu_count()} CPUs (in-process, no server: the machine does not "
         f"matter); {time.monotonic() - started:.0f} s"),
        f"- date: {datetime.now(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}, specd {commit}",
        ("- what it measures: whether the tuner's paired sequential statistics find the best profile through "
         f"the model's {model.noise_sigma:.0%} lognormal noise. The truth is the noise-free wall clock of specd's "
         "emulator model (the seeds' 3090 Ti tables) summed over each mix's requests, the same model that "
         "generates every sample the tuner sees: in-sample and circular. It says nothing about a real server; "
         "see the tuner-accuracy-real-*.md files for a truth the tuner never sees."),
        (f"- {args.mixes} mixes (each {REQUESTS_PER_MIX[0]}-{REQUESTS_PER_MIX[1]} requests of 1-3 task classes, "
         f"prompts {'/'.join(map(str, PROMPTS))} tokens, outputs {'/'.join(map(str, OUTPUTS))} tokens, drawn per "
         f"request), one tuner run each; n = {n}, margin = {margin}, cap {Settings(n=n).cap} requests per "
         "profile (no time budget: in-process); the box "
         "starts on plain"),
        ("- right = the pick's modelled total within the margin of the best's; bad switch = a switch to a profile "
        "more than the margin slower than plain"),
        "",
        "| who picks | right | = modelled best | mean regret | worst regret | switches | bad switches |",
        "|---|---|---|---|---|---|---|",
        tuner.row("tuner (paired, sequential)"),
        legacy.row("the tuner before issue 31 (same mixes and noise seeds)"),
        plain.row("always plain"),
        fixed.row(f"always {fastest} (fastest on average, chosen with the truth)"),
        "",
        (f"Tuner outcomes: {', '.join(f'{k} {v}' for k, v in sorted(outcomes.counts.items()))}; requests per tune "
         f"(all profiles) mean {mean_samples:.0f}, max {max(outcomes.samples)}."),
        "",
        (f"No-difference case: two identical profiles (both plain, independent noise), {args.null_runs} runs on "
         f"random mixes: {null_switches} switches ({null_switches / args.null_runs:.1%}); outcomes "
         f"{', '.join(f'{k} {v}' for k, v in sorted(null_outcomes.counts.items()))}."),
        "",
        f"Mixes where the tuner's pick was more than the margin slower than the best ({len(misses)}):",
        "",
        *(misses or ["- none"]),
        "",
    ]
    text = "\n".join(report)
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
