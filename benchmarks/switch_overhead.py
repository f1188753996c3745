"""How long a real switch and rollback take, and how much of it is specd's own work.

Runs against a private systemd --user and the real llama-server with the tiny model:
    .venv/bin/python benchmarks/switch_overhead.py [--n 6] [--out FILE.md]
specd's overhead = total - llama-server's load time (start to /health 200) - the stability window.
With --out, the report (command, machine, date, load average) is also written to FILE.md.
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

import tomlkit

from specd.context import switcher_for
from specd.profiles.config import load_config
from specd.setup.sandbox import free_port, start_private_systemd

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=6)
    parser.add_argument("--stability", type=float, default=2.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    started_at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    load_before = os.getloadavg()[0]
    root = Path(tempfile.mkdtemp(prefix="specd-bench-"))
    manager = start_private_systemd(root / "systemd")
    os.environ.update(manager.env)
    try:
        profiles = root / "profiles"
        shutil.copytree(REPO / "profiles" / "tiny", profiles)
        base = tomlkit.parse((profiles / "base.toml").read_text())
        base["port"] = free_port()
        base["stability_s"] = args.stability
        (profiles / "base.toml").write_text(tomlkit.dumps(base))
        config = root / "specd.toml"
        config.write_text(f'unit = "bench-llama.service"\nscope = "user"\nprofiles_dir = "{profiles}"\n')
        switcher = switcher_for(load_config(config).deployment())
        rows: list[tuple[str, float, float, float, float]] = []
        names = ["autoregressive", "ngram-simple"]
        for index in range(args.n):
            name = names[index % 2]
            start = time.monotonic()
            outcome = switcher.switch(name)
            total = time.monotonic() - start
            load = outcome.health.load_s if outcome.health else 0.0
            gen = outcome.generation
            rows.append((name, total, load, gen.preflight_s or 0.0, total - load - args.stability))
        rollbacks = []
        for _ in range(max(2, args.n // 2)):
            start = time.monotonic()
            switcher.rollback()
            rollbacks.append(time.monotonic() - start)
        lines = [f"{'profile':16} {'total s':>8} {'load s':>8} {'preflight s':>12} {'specd s':>8}"]
        for name, total, load, pre, own in rows:
            lines.append(f"{name:16} {total:8.2f} {load:8.2f} {pre:12.3f} {own:8.2f}")
        own = [r[4] for r in rows[1:]]
        lines += [
            "",
            f"switches: n={len(rows)}, stability window {args.stability:.1f} s",
            (f"median total {statistics.median(r[1] for r in rows):.2f} s, median llama-server load "
            f"{statistics.median(r[2] for r in rows):.2f} s, median specd overhead {statistics.median(own):.2f} s "
            "(excluding the first switch, which creates the unit)"),
            (f"rollback: n={len(rollbacks)}, median {statistics.median(rollbacks):.2f} s "
            "(includes the profile's stability window and the server load)"),
        ]
        print("\n".join(lines))
        if args.out is not None:
            commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                                    text=True, check=False).stdout.strip()
            args.out.write_text("\n".join([
                "# Switch and rollback overhead on the real tiny llama-server",
                "",
                f"- command: `{' '.join(['.venv/bin/python', 'benchmarks/switch_overhead.py', *sys.argv[1:]])}`",
                (f"- machine: {platform.platform()}, {os.cpu_count()} CPUs, shared with other jobs: 1-min load "
                 f"average {load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"),
                f"- date: {started_at}, specd {commit}",
                ("- what: `Switcher.switch` alternating autoregressive and ngram-simple (profiles/tiny, Gemma 3 "
                 "270M Q4_K_M on llama-server) under a private systemd --user; load = llama-server's start to "
                 "/health 200 as the gate saw it; specd s = total - load - stability window"),
                "",
                "```",
                *lines,
                "```",
                "",
            ]))
    finally:
        manager.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
