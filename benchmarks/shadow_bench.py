"""Does a shadow bench pick what an exclusive bench picks, while the live server keeps serving?

    .venv/bin/python benchmarks/shadow_bench.py [--n 6] [--workload repeat-input]
        [--out benchmarks/results/shadow-bench]

Everything is real: a private `systemd --user`, the real llama-server (CPU build) with the tiny
Gemma 3 270M model, `specd daemon` proxying, the real CLI. Two profiles, plain decoding
(autoregressive, the live one) and ngram-simple, on a workload where n-gram speculation has a clear
edge (`repeat-input`: the answer repeats the prompt). `threads = 1` each, so two servers fit.

1. Exclusive: `specd bench autoregressive ngram-simple` with no client traffic; the bench switches
   the live unit to each profile. Its pick (lowest median wall clock) is the truth here.
2. Shadow: the same bench with `--shadow`, while live clients send completions through the proxy
   (each: a request, then a random pause, `--live-pause`: traffic with idle gaps). Counted: live requests
   and failures, the shadow samples that saw live load (left out of the comparison when enough clean
   ones remain), and the pick.
The trivial baseline: keep the live profile (autoregressive) without measuring.
Writes <out>.json and <out>.md (command, machine, date, load average).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from switch_wait import REPO, Box, wait_http
from switch_wait import make_box as switch_wait_box

PROFILES = ("autoregressive", "ngram-simple")


def make_box(root: Path) -> Box:
    return switch_wait_box(root, clients=1, ctx_size=4096)


class LiveClients:
    """Clients of the live service through the proxy: a completion, a random pause, again."""

    def __init__(self, url: str, clients: int, pause_s: tuple[float, float], seed: int = 7) -> None:
        self.url = f"{url}/v1/completions"
        self.pause_s = pause_s
        self.sent, self.failures, self.walls = 0, [], []  # type: int, list[str], list[float]
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(random.Random(seed + i),)) for i in range(clients)]

    def _run(self, rng: random.Random) -> None:
        with httpx.Client(timeout=300) as client:
            while not self._stop.is_set():
                started = time.monotonic()
                try:
                    answer = client.post(self.url, json={"model": "tiny", "prompt": "def add(a, b):\n",
                                                         "max_tokens": 24, "temperature": 0})
                    if answer.status_code != 200:
                        self.failures.append(f"{answer.status_code} {answer.text[:200]}")
                except httpx.HTTPError as exc:
                    self.failures.append(f"{type(exc).__name__}: {exc}")
                self.walls.append(time.monotonic() - started)
                self.sent += 1
                self._stop.wait(rng.uniform(*self.pause_s))

    def __enter__(self) -> Self:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(300)


def pick(report: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    cells = {name: {"n": cell["n"], "median_ms": round(cell["wall_ms"]["median"], 1),
                    "ci95_ms": [round(x, 1) for x in cell["wall_ms"]["ci95"]]}
             for name, cell in report["cells"].items()}
    best = min(cells, key=lambda name: cells[name]["median_ms"]) if cells else None
    return best, cells


def bench(box: Box, args: argparse.Namespace, *extra: str) -> dict[str, Any]:
    result = box.specd("bench", *PROFILES, "--workload", args.workload, "--n", str(args.n), "--max-tokens",
                       str(args.max_tokens), "--json", *extra, timeout=3600)
    if result.returncode != 0:
        raise SystemExit(f"specd bench {' '.join(extra)} failed:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}")
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def run(args: argparse.Namespace) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="specd-shadow-bench-"))
    box = make_box(root)
    daemon: subprocess.Popen[bytes] | None = None
    load_start = os.getloadavg()
    try:
        first = box.specd("switch", PROFILES[0], "--strategy", "restart")
        if first.returncode != 0:
            raise SystemExit(f"specd switch failed:\n{first.stdout}\n{first.stderr}")
        with open(root / "daemon.log", "wb") as log:
            daemon = subprocess.Popen([sys.executable, "-m", "specd", "daemon"], env=box.env, cwd=str(REPO),
                                      stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{box.proxy_port}"
        wait_http(f"{url}/health")
        started = time.monotonic()
        exclusive = bench(box, args)
        exclusive_s = time.monotonic() - started
        started = time.monotonic()
        with LiveClients(url, args.live_clients, (args.live_pause[0], args.live_pause[1])) as live:
            shadow = bench(box, args, "--shadow")
        shadow_s = time.monotonic() - started
        live_profile = json.loads(box.specd("status", "--json").stdout).get("active_profile")
        exclusive_pick, exclusive_cells = pick(exclusive)
        shadow_pick, shadow_cells = pick(shadow)
        return {
            "workload": args.workload, "n": args.n, "max_tokens": args.max_tokens,
            "exclusive": {"pick": exclusive_pick, "cells": exclusive_cells, "notes": exclusive["notes"],
                          "elapsed_s": round(exclusive_s, 1)},
            "shadow": {"pick": shadow_pick, "cells": shadow_cells, "notes": shadow["notes"],
                       "elapsed_s": round(shadow_s, 1)},
            "same_pick": exclusive_pick == shadow_pick,
            "trivial_baseline_pick": PROFILES[0],
            "live": {"clients": args.live_clients, "pause_s": args.live_pause, "requests": live.sent,
                     "failed": len(live.failures),
                     "failure_examples": live.failures[:5],
                     "wall_s_median": round(sorted(live.walls)[len(live.walls) // 2], 2) if live.walls else None,
                     "profile_after": live_profile},
            "load_average_start": load_start, "load_average_end": os.getloadavg(),
        }
    except BaseException:
        log_path = root / "daemon.log"
        print(log_path.read_text(errors="replace")[-4000:] if log_path.exists() else "", file=sys.stderr)
        raise
    finally:
        if daemon is not None and daemon.poll() is None:
            daemon.terminate()
            try:
                daemon.wait(60)
            except subprocess.TimeoutExpired:
                daemon.kill()
        for unit in (box.unit, "llama-bench-green.service"):
            subprocess.run(["systemctl", "--user", "stop", unit], env=box.env, capture_output=True, check=False)
        box.manager.stop()
        shutil.rmtree(root, ignore_errors=True)


def markdown(report: dict[str, Any], command: str, commit: str) -> str:
    def rows(mode: str) -> list[str]:
        part = report[mode]
        return [f"| {mode} | {name} | {cell['n']} | {cell['median_ms']} | {cell['ci95_ms'][0]}-{cell['ci95_ms'][1]} | "
                f"{'**pick**' if name == part['pick'] else ''} |" for name, cell in part["cells"].items()]

    load = report["load_average_start"], report["load_average_end"]
    live = report["live"]
    shadow_notes = "\n".join(f"  - {note}" for note in report["shadow"]["notes"])
    return "\n".join([
        "# Shadow bench against an exclusive bench (real tiny model)",
        "",
        f"- command: `{command}`",
        (f"- machine: {platform.node()}: {platform.platform()}, {os.cpu_count()} CPUs; load average (1/5/15 min) at "
        f"start {load[0][0]:.2f}/{load[0][1]:.2f}/{load[0][2]:.2f}, at end {load[1][0]:.2f}/{load[1][1]:.2f}/"
        f"{load[1][2]:.2f} (the box is shared: other work ran)"),
        f"- date: {datetime.now(UTC).isoformat(timespec='seconds')}, specd {commit}",
        ("- server: the real llama-server 0.3.36 (CPU build), Gemma 3 270M Q4_K_M, `threads = 1`, `parallel = 1`; "
        "the real `specd daemon` proxies the live server"),
        (f"- workload: `{report['workload']}` (built in), n = {report['n']} per profile, "
        f"max_tokens {report['max_tokens']}"),
        ("- truth: the exclusive bench's pick (it has the server to itself); trivial baseline: keep the live "
        f"profile ({report['trivial_baseline_pick']}) without measuring"),
        "",
        "| bench | profile | n | wall ms median | 95% CI | |",
        "|---|---|---|---|---|---|",
        *rows("exclusive"),
        *rows("shadow"),
        "",
        (f"Same pick: **{'yes' if report['same_pick'] else 'no'}** (exclusive {report['exclusive']['pick']}, shadow "
        f"{report['shadow']['pick']}; the trivial baseline would keep {report['trivial_baseline_pick']})."),
        "",
        (f"Live traffic during the shadow bench: {live['clients']} client(s) through the proxy, each pausing "
        f"{live['pause_s'][0]:g}-{live['pause_s'][1]:g} s between requests, {live['requests']} "
        f"requests, **{live['failed']} failed**, median wall {live['wall_s_median']} s; the live profile after it: "
        f"{live['profile_after']}. Exclusive bench {report['exclusive']['elapsed_s']} s (no clients), shadow bench "
        f"{report['shadow']['elapsed_s']} s."),
        "",
        "The shadow bench's own notes (which samples were clean):",
        shadow_notes,
        "",
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=6)
    parser.add_argument("--workload", default="repeat-input")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--live-clients", type=int, default=1)
    parser.add_argument("--live-pause", type=float, nargs=2, default=(10.0, 20.0), metavar=("MIN", "MAX"),
                        help="seconds each live client pauses between requests (drawn uniformly)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "shadow-bench")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped run still stops its systemd and servers
    command = "python benchmarks/shadow_bench.py " + " ".join(sys.argv[1:])
    report = run(args)
    report["command"] = command
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                            check=False).stdout.strip()
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=1))
    args.out.with_suffix(".md").write_text(markdown(report, command, commit))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
