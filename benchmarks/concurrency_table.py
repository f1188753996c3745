"""The same profiles ranked single-stream vs at concurrency 8, with and without prompt-cache reuse, on the tiny server.

Runs against a private systemd --user and the real llama-server with the tiny model:
    .venv/bin/python benchmarks/concurrency_table.py [--max-tokens 32] [--n1 8] [--n8 32] [--save DIR]
Profiles: plain and ngram-simple decoding, both with `parallel = 8` (so concurrency 8 batches) and
the tiny base settings. Workload: two-turn conversations on a block of Python code ("repeat it
exactly", then "once more"), i.e. an answer that repeats the prompt (where n-gram drafting pays) and a
second turn whose prefix the prompt cache can reuse. Each cell is one interleaved `bench_profiles` run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path

import tomlkit

from specd.context import seams_for
from specd.profiles.config import load_config
from specd.setup.sandbox import free_port, start_private_systemd
from specd.tune.bench import DeploymentTarget, Report, Settings, run_bench
from specd.tune.workloads import Workload, WorkloadRequest

REPO = Path(__file__).resolve().parent.parent
FUNCTIONS = (
    "def add(a, b):\n    return a + b\n",
    "def scale(values, factor):\n    return [v * factor for v in values]\n",
    "def clamp(x, lo, hi):\n    return max(lo, min(hi, x))\n",
    "def mean(values):\n    return sum(values) / len(values)\n",
    "def first_word(text):\n    return text.split()[0] if text else ''\n",
    "def is_even(n):\n    return n % 2 == 0\n",
)
PROFILES = {"plain-np8": "", "ngram-np8": '[speculative]\ntype = "ngram-simple"\ndraft_n_max = 16\n'}


def conversations(count: int, max_tokens: int) -> Workload:
    requests = []
    for c in range(count):
        shift = c % len(FUNCTIONS)
        code = "\n".join(FUNCTIONS[shift:] + FUNCTIONS[:shift])
        first = {"role": "user", "content": f"Repeat the following Python code exactly, with no other text:\n"
                                            f"```python\n{code}```"}
        turns = [[first], [first, {"role": "assistant", "content": f"(answer {c})"},
                           {"role": "user", "content": "Repeat the same code once more, exactly."}]]
        for messages in turns:
            requests.append(WorkloadRequest(body={"messages": messages, "max_tokens": max_tokens},
                                            task_class="code", conversation=f"c{c}"))
    return Workload("code-conversations", tuple(requests))


def row(report: Report, profile: str) -> str:
    cell = report.as_json()["cells"][profile]
    wall = cell["wall_ms"]
    return (f"{profile} {wall['median'] / 1000:.2f} s [{wall['ci95'][0] / 1000:.2f}-{wall['ci95'][1] / 1000:.2f}], "
            f"prefill {cell['prefill_ms_median']:.0f} ms (no reuse {cell['prefill_ms_no_reuse_median']:.0f}), "
            f"cache_n {cell['cache_n_median']:.0f}, n {cell['n']}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--n1", type=int, default=8, help="requests per profile single-stream")
    parser.add_argument("--n8", type=int, default=32, help="requests per profile at concurrency 8")
    parser.add_argument("--save", type=Path, help="write each cell's bench report (JSON) into this directory")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="specd-conc-"))
    manager = start_private_systemd(root / "systemd")
    os.environ.update(manager.env)
    os.environ["XDG_STATE_HOME"] = str(root / "state")
    try:
        profiles = root / "profiles"
        shutil.copytree(REPO / "profiles" / "tiny", profiles)
        base = tomlkit.parse((profiles / "base.toml").read_text())
        base["port"] = free_port()
        base["stability_s"] = 1
        (profiles / "base.toml").write_text(tomlkit.dumps(base))
        for name, spec in PROFILES.items():
            (profiles / f"{name}.toml").write_text(f'inherits = "base"\nparallel = 8\nctx_size = 8192\n{spec}')
        config = root / "specd.toml"
        config.write_text(f'unit = "conc-llama.service"\nscope = "user"\nprofiles_dir = "{profiles}"\n')
        target = DeploymentTarget(load_config(config).deployment(), seams=seams_for)
        target.activate("plain-np8")
        lines = ["| concurrency | cache reuse | rank 1 | rank 2 | ngram/plain |", "|---|---|---|---|---|"]
        try:
            for level, n in ((1, args.n1), (8, args.n8)):
                for reuse in (False, True):
                    workload = conversations(max(n // 2, 1), args.max_tokens)
                    settings = Settings(n=n, concurrency=level, cache_reuse=reuse, early_stop=False,
                                        per_round=max(n // 2, level))
                    report = run_bench(target, list(PROFILES), workload, settings)
                    if args.save is not None:
                        args.save.mkdir(parents=True, exist_ok=True)
                        cell = args.save / f"c{level}-{'reuse' if reuse else 'cold'}.json"
                        cell.write_text(json.dumps(report.as_json(), indent=1))
                    ranked = sorted(report.benched(), key=lambda p: report.summary(p).median)
                    ratio = report.summary("ngram-np8").median / report.summary("plain-np8").median
                    lines.append(f"| {level} | {'on' if reuse else 'off'} | {row(report, ranked[0])} | "
                                 f"{row(report, ranked[1])} | {ratio:.2f} |")
                    print(lines[-1], f"({report.rounds} rounds, {report.switches} switches, "
                                     f"{report.elapsed_s:.0f} s)", flush=True)
        finally:
            target.close()
        print("\n".join(["", *lines]))
    finally:
        manager.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
