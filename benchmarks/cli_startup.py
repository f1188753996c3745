"""How long `specd --help` and `specd status` take from the shell, wall clock, as a user meets them.

    .venv/bin/python benchmarks/cli_startup.py [--n 15] [--baseline DIR] [--out FILE.md]

`status` runs against a real deployment: a private systemd --user with the tiny llama-server
running under it (switched to once before the runs), so each call connects to the manager over
D-Bus and asks the server's /health and /v1/models, as on a box. Each command runs --n times in
turn (help, status, help, ...) as a fresh `python -m specd` process; the figures are the median,
the 90th percentile and the fastest. --baseline DIR runs the same commands with another checkout's
`specd` package first on PYTHONPATH (e.g. `git archive BASE specd | tar -x -C DIR`), interleaved
with this one's, so both meet the same load. --python runs the commands with another interpreter:
a user's install has no test tools in its venv (selenium brings trio, which httpcore then imports),
so the figures that count are from a venv made as install.sh makes it. The one-minute load
average is sampled before and after: wall-clock start-up on a shared box moves with it, so each
figure also gives the process's CPU time (user + system), which moves far less.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from tiny_rig import tiny_profiles

from specd.context import switcher_for
from specd.profiles.config import load_config
from specd.setup.sandbox import start_private_systemd

REPO = Path(__file__).resolve().parent.parent
COMMANDS = (("--help",), ("status",))


def timed(python: str, args: tuple[str, ...], env: dict[str, str]) -> tuple[float, float]:
    """One `python -m specd ARGS`: (wall clock, CPU time user + system). Run from / so that the
    current directory (first on sys.path for -m) cannot shadow the checkout under test."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result = subprocess.run([python, "-m", "specd", *args], env=env, capture_output=True, text=True, check=False,
                            cwd="/")
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise SystemExit(f"specd {' '.join(args)} exited {result.returncode}:\n{result.stdout}{result.stderr}")
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def summary(samples: list[tuple[float, float]]) -> str:
    walls = sorted(wall for wall, _ in samples)
    p90 = walls[min(len(walls) - 1, round(0.9 * (len(walls) - 1)))]
    cpu = statistics.median(cpu for _, cpu in samples)
    return (f"wall median {statistics.median(walls):.3f} s, p90 {p90:.3f} s, fastest {walls[0]:.3f} s; "
            f"CPU (user + system) median {cpu:.3f} s (n={len(walls)})")


def deployment(root: Path) -> Path:
    """The tiny profiles on a free port, switched to once under the private manager; returns specd.toml."""
    profiles = tiny_profiles(root)
    config = root / "specd.toml"
    config.write_text(f'unit = "bench-startup-{os.getpid()}.service"\nscope = "user"\nprofiles_dir = "{profiles}"\n')
    switcher_for(load_config(config).deployment()).switch("autoregressive")
    return config


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=15)
    parser.add_argument("--baseline", type=Path, help="another checkout whose specd package to time as well")
    parser.add_argument("--python", default=sys.executable, help="the interpreter of the venv to time")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    started_at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    root = Path(tempfile.mkdtemp(prefix="specd-startup-"))
    os.environ["XDG_STATE_HOME"] = str(root / "state")
    manager = start_private_systemd(root / "systemd")
    os.environ.update(manager.env)
    try:
        config = deployment(root)
        env = {**os.environ, "SPECD_CONFIG": str(config), "COLUMNS": "100"}
        sources = {"this checkout": env}
        if args.baseline is not None:
            sources = {f"baseline {args.baseline}": {**env, "PYTHONPATH": str(args.baseline.resolve())}, **sources}
        for source_env in sources.values():  # warm: .pyc files written, the page cache filled
            for command in COMMANDS:
                timed(args.python, command, source_env)
        load_before = os.getloadavg()[0]
        samples: dict[tuple[str, tuple[str, ...]], list[tuple[float, float]]] = {}
        for _ in range(args.n):
            for label, source_env in sources.items():
                for command in COMMANDS:
                    samples.setdefault((label, command), []).append(timed(args.python, command, source_env))
        load_after = os.getloadavg()[0]
    finally:  # the manager takes the server down with it
        manager.stop()
        shutil.rmtree(root, ignore_errors=True)
    lines = [f"{label}, `specd {' '.join(command)}`: {summary(times)}" for (label, command), times in samples.items()]
    report = "\n".join(lines)
    print(report)
    if args.out:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                                check=False).stdout.strip()
        args.out.write_text(
            "# CLI start-up: `specd --help` and `specd status`, wall clock\n\n"
            f"- command: `{' '.join(['.venv/bin/python', 'benchmarks/cli_startup.py', *sys.argv[1:]])}`\n"
            f"- commit: {commit} (working tree)\n"
            f"- machine: `{' '.join(platform.uname())}`, {os.cpu_count()} cores\n"
            f"- date: {started_at}\n"
            f"- load average (1 min): {load_before:.2f} before the timed runs, {load_after:.2f} after\n"
            f"- python: `{args.python}`\n"
            "- what: each command as a fresh `python -m specd` process; `status` against the tiny llama-server "
            "running under a private systemd --user (D-Bus and the /health probe included)\n\n"
            + "\n".join(f"- {line}" for line in lines) + "\n")


if __name__ == "__main__":
    main()
