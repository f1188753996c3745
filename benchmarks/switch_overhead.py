"""How long a real switch and rollback take, and how much of it is specd's own work.

Runs against a private systemd --user and the real llama-server with the tiny model:
    .venv/bin/python benchmarks/switch_overhead.py [--n 6]
specd's overhead = total - llama-server's load time (start to /health 200) - the stability window.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import tomlkit

from specd.profiles.config import load_config
from specd.setup.sandbox import free_port, start_private_systemd
from specd.context import switcher_for

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=6)
    parser.add_argument("--stability", type=float, default=2.0)
    args = parser.parse_args()
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
        print(f"{'profile':16} {'total s':>8} {'load s':>8} {'preflight s':>12} {'specd s':>8}")
        for name, total, load, pre, own in rows:
            print(f"{name:16} {total:8.2f} {load:8.2f} {pre:12.3f} {own:8.2f}")
        own = [r[4] for r in rows[1:]]
        print(f"\nswitches: n={len(rows)}, stability window {args.stability:.1f} s")
        print(f"median total {statistics.median(r[1] for r in rows):.2f} s, median llama-server load "
              f"{statistics.median(r[2] for r in rows):.2f} s, median specd overhead {statistics.median(own):.2f} s "
              f"(excluding the first switch, which creates the unit)")
        print(f"rollback: n={len(rollbacks)}, median {statistics.median(rollbacks):.2f} s "
              f"(includes the profile's stability window and the server load)")
    finally:
        manager.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
