"""How often the tuner's pick is right against an exhaustive, noise-free measurement.

Runs on the emulator's performance model in-process (specd.tune.bench.ModelTarget, the seeds' 3090 Ti
tables, 3% lognormal noise): for every scenario (task class x prompt length x output length) the
tuner benches plain / MTP / DFlash with early stopping and decides; the truth is the noise-free
modelled wall clock of every profile. Prints, per scenario and overall: the pick, the true best,
the margin over the active profile, the modelled bench time, and the accuracy.

    python benchmarks/tuner_accuracy.py [--seeds 5] [--n 10] [--margin 0.05]
"""

from __future__ import annotations

import argparse
import itertools

from specd.tune.bench import ModelTarget, Settings
from specd.emulator.model import expected_wall_ms, load_model
from specd.tune.tuner import tune
from specd.tune.workloads import Workload, WorkloadRequest, filler_text

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--n", type=int, default=10)
    parser.add_argument("--margin", type=float, default=0.05)
    args = parser.parse_args()
    model = load_model()
    total = right = acceptable = switches = 0
    bench_s = 0.0
    print(f"{'scenario':28} {'truth':7} {'picks (per seed)':28} {'gain%':>6} {'bench min':>9}")
    for task, prompt, output in itertools.product(ASKS, PROMPTS, OUTPUTS):
        truth = {name: expected_wall_ms(model.mode(mode), prompt, output, task)  # type: ignore[arg-type]
                 for name, mode in MODES.items()}
        best = min(truth, key=truth.__getitem__)
        picks, gains, spent = [], [], 0.0
        for seed in range(args.seeds):
            target = ModelTarget(model, MODES, seed=seed, active="plain")
            result = tune(target, list(MODES), workload(task, prompt, output), Settings(n=args.n),
                          margin=args.margin)
            decision = result.decision
            chosen = decision.best if decision.switch and decision.best else "plain"
            picks.append(chosen)
            total += 1
            right += chosen == best
            # "acceptable": within the margin of the true best (the tuner is allowed to keep a near-tie)
            acceptable += truth[chosen] <= truth[best] * (1 + args.margin)
            switches += decision.switch
            gains.append(100.0 * (1 - truth[chosen] / truth["plain"]))
            rows = [r for rs in result.report.results.values() for r in rs]
            spent += sum(r.wall_ms for r in rows) / 1000.0
        bench_s += spent
        print(f"{task + ' ' + str(prompt) + '/' + str(output):28} {best:7} {','.join(picks):28} "
              f"{sum(gains) / len(gains):6.1f} {spent / args.seeds / 60:9.1f}")
    print(f"\nruns {total}: pick == exhaustive best {right / total:.0%}; within the {args.margin:.0%} margin of it "
          f"{acceptable / total:.0%}; switched {switches}; modelled bench time {bench_s / total / 60:.1f} min per tune")


if __name__ == "__main__":
    main()
