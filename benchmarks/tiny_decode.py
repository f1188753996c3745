"""Decode speed of each tiny profile on this machine's CPU (real llama-server, Gemma 3 270M Q4_K_M).

    .venv/bin/python benchmarks/tiny_decode.py [--n 5] [--max-tokens 200]

Two prompts per profile: free-form prose, and a rewrite whose answer repeats the prompt (where
n-gram speculation can accept drafts). Prints medians of decode tok/s, prefill ms, wall clock and
draft acceptance from llama-server's `timings`, N requests each, temperature 0, fixed seed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import httpx
import tomlkit

from specd.context import switcher_for
from specd.profiles.config import load_config
from specd.setup.sandbox import free_port, private_systemd_env

REPO = Path(__file__).resolve().parent.parent
CODE = "\n\n".join(f"def f{i}(x):\n    y = x * {i} + {i * 3}\n    return y - {i}" for i in range(12))
PROMPTS = {
    "prose": "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "rewrite": f"Repeat the following Python code exactly, with no changes and no commentary:\n\n{CODE}",
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=200)
    parser.add_argument("--profiles", nargs="*", default=["autoregressive", "ngram-simple", "ngram-mod", "draft"])
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="specd-decode-"))
    with private_systemd_env(root / "systemd"):
        profiles = root / "profiles"
        shutil.copytree(REPO / "profiles" / "tiny", profiles)
        base = tomlkit.parse((profiles / "base.toml").read_text())
        port = free_port()
        base["port"] = port
        base["stability_s"] = 1
        (profiles / "base.toml").write_text(tomlkit.dumps(base))
        config = root / "specd.toml"
        config.write_text(f'unit = "decode-bench.service"\nscope = "user"\nprofiles_dir = "{profiles}"\n')
        switcher = switcher_for(load_config(config).deployment())
        print(f"machine: {os.cpu_count()} CPUs; n={args.n} per cell, max_tokens={args.max_tokens}")
        print(f"{'profile':16} {'prompt':8} {'decode tok/s':>12} {'prefill ms':>10} {'wall s':>7} {'accepted':>9}")
        for name in args.profiles:
            switcher.switch(name)
            for label, prompt in PROMPTS.items():
                rates, prefill, walls, drafted, accepted = [], [], [], 0, 0
                for _ in range(args.n):
                    body = {"model": "tiny", "messages": [{"role": "user", "content": prompt}],
                            "max_tokens": args.max_tokens, "temperature": 0, "seed": 42, "cache_prompt": False}
                    start = time.monotonic()
                    response = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body, timeout=300)
                    walls.append(time.monotonic() - start)
                    timings = response.json()["timings"]
                    rates.append(timings["predicted_per_second"])
                    prefill.append(timings["prompt_ms"])
                    drafted += timings.get("draft_n", 0)
                    accepted += timings.get("draft_n_accepted", 0)
                share = f"{accepted}/{drafted}" if drafted else "-"
                print(f"{name:16} {label:8} {statistics.median(rates):12.1f} {statistics.median(prefill):10.0f} "
                      f"{statistics.median(walls):7.2f} {share:>9}")
        switcher.systemd.stop(switcher.unit)


if __name__ == "__main__":
    main()
