"""Decode speed of the tiny llama-server at --threads 1 and 2 while the 2-core box is busy with other jobs.

llama.cpp's worker threads spin-wait on each other between graph steps; when other processes
hold the cores, a two-thread server waits for a descheduled partner at every step. This measures
what that costs on the box as it is (run it while the machine is shared, and read the load
average it records): the same plain-decoding profile (profiles/tiny/autoregressive.toml, only
--threads differs), the same prompt, requests alternated between the two servers.

    .venv/bin/python benchmarks/threads_under_load.py [--n 3] [--max-tokens 64] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import tomlkit

from specd.profiles.flags import binary_flags
from specd.profiles.load import load_profile
from specd.setup.sandbox import free_port
from specd.unit.render import build_argv

REPO = Path(__file__).resolve().parent.parent
PROMPT = "Chapter One\n\nMara had lived in a fishing village for ten years. Every morning"


def start(root: Path, threads: int) -> tuple[int, subprocess.Popen[bytes]]:
    profiles = root / f"t{threads}"
    shutil.copytree(REPO / "profiles" / "tiny", profiles)
    base = tomlkit.parse((profiles / "base.toml").read_text())
    port = base["port"] = free_port()
    base["threads"] = threads
    (profiles / "base.toml").write_text(tomlkit.dumps(base))
    profile = load_profile(profiles, "autoregressive")
    log = open(root / f"t{threads}.log", "wb")  # noqa: SIM115 - lives as long as the server
    return int(port), subprocess.Popen(build_argv(profile, binary_flags(profile.binary)), stdout=log,
                                       stderr=subprocess.STDOUT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="specd-threads-"))
    started_at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    servers = {threads: start(root, threads) for threads in (1, 2)}
    rates: dict[int, list[float]] = {1: [], 2: []}
    loads: list[float] = []
    try:
        for port, _ in servers.values():
            while True:
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.5)
        body = {"prompt": PROMPT, "max_tokens": args.max_tokens, "temperature": 0, "seed": 42, "cache_prompt": False}
        for round_number in range(args.n + 1):  # round 0 warms both up and is not counted
            for threads in ((1, 2) if round_number % 2 else (2, 1)):
                loads.append(os.getloadavg()[0])
                port = servers[threads][0]
                timings = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json=body,
                                     timeout=900).json()["timings"]
                if round_number:
                    rates[threads].append(float(timings["predicted_per_second"]))
    finally:
        for _, process in servers.values():
            process.terminate()
            process.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip()
    rows = [f"| --threads {t} | {', '.join(f'{r:.1f}' for r in rates[t])} | {statistics.median(rates[t]):.1f} |"
            for t in (1, 2)]
    report = "\n".join([
        "# Tiny llama-server decode at --threads 1 vs 2 on the shared, loaded 2-core box",
        "",
        f"- command: `{' '.join(['.venv/bin/python', 'benchmarks/threads_under_load.py', *sys.argv[1:]])}`",
        (f"- machine: {platform.platform()}, {os.cpu_count()} CPUs, shared with other jobs: 1-min load average "
         f"{min(loads):.1f}-{max(loads):.1f} during the run"),
        f"- date: {started_at}, specd {commit}",
        (f"- what: profiles/tiny/autoregressive.toml (Gemma 3 270M Q4_K_M, plain decoding) with only --threads "
         f"changed, two servers side by side, requests alternated, {args.max_tokens} tokens at temperature 0, "
         "decode rate from llama-server's timings"),
        "",
        "| server | decode tok/s per request | median |",
        "|---|---|---|",
        *rows,
        "",
    ])
    print(report)
    if args.out is not None:
        args.out.write_text(report)


if __name__ == "__main__":
    main()
