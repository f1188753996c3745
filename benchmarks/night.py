"""One real night: the specd daemon and its proxy in front of the real tiny model, the nightly run fired
by the daemon's own scheduler, and what the owner reads the next morning.

    PYTHONPATH=. .venv/bin/python benchmarks/night.py [--no-capture] [--concurrency 2] [--idle-s 60]
        [--fire-in-s 30] [--n 6] [--out benchmarks/results/night.md]

Everything is real: a private `systemd --user` manager runs the deployment's unit (profiles/tiny:
autoregressive and ngram-simple, Gemma 3 270M Q4_K_M on the CPU, `-np 2`), `specd daemon` runs in
its own process with `[proxy] capture_bodies` on, and the traffic generator of the night's tests
(tests/system/night_rig.py) sends a known mix through the proxy: 14 requests (code, factual,
creative asks and one two-turn conversation) at 2 in flight, sampled at temperature 0.7 / top_p
0.9. `[tuner] cron` is set to a second `--fire-in-s` after the daemon starts, inside the idle
window, so the run first waits for `--idle-s` seconds without traffic. The result file holds the
command, machine and date, the traffic sent, and the morning's `specd status` and
`specd history --events` (verbatim).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import tomlkit

from specd.setup.sandbox import free_port, private_systemd_env
from tests.system.night_rig import cron_in, expected_mix, night_events, send_mix, tiny_mix, tuner_table

REPO = Path(__file__).resolve().parent.parent
UNIT = "llama-night.service"


def specd(*args: str, columns: int = 200) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specd", *args], env={**os.environ, "COLUMNS": str(columns)},
                          capture_output=True, text=True, timeout=600, check=False, cwd=str(REPO))


def prepare(root: Path, args: argparse.Namespace) -> tuple[int, float]:
    """The tiny profiles and specd.toml in `root` (SPECD_CONFIG points at it); the proxy's port and when the
    nightly run fires (epoch seconds)."""
    profiles = root / "profiles"
    shutil.copytree(REPO / "profiles" / "tiny", profiles)
    base = tomlkit.parse((profiles / "base.toml").read_text())
    base.update({"port": free_port(), "stability_s": 1, "parallel": 2, "health_timeout_s": 120})
    (profiles / "base.toml").write_text(tomlkit.dumps(base))
    proxy_port = free_port()
    cron, fires_at = cron_in(args.fire_in_s)
    config = root / "specd.toml"
    config.write_text(
        f'unit = "{UNIT}"\nscope = "user"\nprofiles_dir = "{profiles}"\nlock_timeout_s = 60\n\n'
        f'[proxy]\nlisten = "127.0.0.1:{proxy_port}"\nhold_timeout_s = 120\n'
        f"capture_bodies = {str(args.capture).lower()}\n\n[daemon]\nhealth_interval_s = 5\n\n"
        "[tuner]\n" + tuner_table(cron, idle_s=args.idle_s, budget_minutes=args.budget_minutes, n=args.n,
                                  candidates=["autoregressive", "ngram-simple"]))
    os.environ["SPECD_CONFIG"] = str(config)
    return proxy_port, fires_at


def wait_http(url: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"{url} did not answer in {timeout_s:g} s")


def run(args: argparse.Namespace) -> str:
    root = Path(tempfile.mkdtemp(prefix="specd-night-"))
    with private_systemd_env(root / "systemd"):
        proxy_port, fires_at = prepare(root, args)
        first = specd("switch", "autoregressive")
        if first.returncode != 0:
            raise SystemExit(f"specd switch autoregressive failed:\n{first.stdout}\n{first.stderr}")
        log_path = root / "daemon.log"
        with log_path.open("wb") as log:
            daemon = subprocess.Popen([sys.executable, "-m", "specd", "daemon"], env=os.environ.copy(),
                                      cwd=str(REPO), stdout=log, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{proxy_port}"
            wait_http(f"{url}/health")
            load_before = os.getloadavg()
            mix = tiny_mix()
            sent = send_mix(url, mix, args.concurrency)
            deadline = time.monotonic() + 60.0 * (args.budget_minutes + 10)
            while not night_events(UNIT):
                if daemon.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"no nightly run recorded:\n{log_path.read_text()[-3000:]}")
                time.sleep(2.0)
            load_after = os.getloadavg()
            status = specd("status")
            events = specd("history", "--events")
            generations = specd("history")
            events_json = json.loads(specd("history", "--events", "--json").stdout)
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(60)
    event = night_events_from(events_json)
    numbers = event["numbers"] if isinstance(event["numbers"], dict) else {}
    night_s = datetime.fromisoformat(str(event["at"])).timestamp() - fires_at
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=str(REPO), check=False).stdout.strip()
    lines = [
        "# One real night: the daemon, its proxy and the tiny model, fired by the daemon's scheduler",
        "",
        f"- command: `{' '.join(['PYTHONPATH=. .venv/bin/python benchmarks/night.py', *sys.argv[1:]])}`",
        (f"- machine: {platform.node()} ({platform.system()} {platform.release()}, {os.cpu_count()} CPUs, no GPU); "
        f"load average {load_before[0]:.1f} when the traffic started, {load_after[0]:.1f} when the night ended "
        "(the CPUs are shared with other jobs)"),
        f"- date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, specd at commit {commit}",
        ("- model and profiles: profiles/tiny (Gemma 3 270M Q4_K_M, llama.cpp from the llama-cpp-python 0.3.36 "
        "sdist, CPU, `-np 2`); candidates autoregressive and ngram-simple"),
        (f"- config: `[proxy] capture_bodies = {str(args.capture).lower()}`; `[tuner]` cron fired "
        f"{args.fire_in_s:g} s after the daemon started, idle {args.idle_s:g} s, budget {args.budget_minutes:g} min, "
        f"n = {args.n}"),
        (f"- traffic sent through the proxy: {len(sent.statuses)} requests at {args.concurrency} in flight "
        f"({', '.join(f'{k} {v}' for k, v in sorted(expected_mix(mix).items()))}; one two-turn conversation; "
        f"temperature 0.7, top_p 0.9), {sum(1 for s in sent.statuses if s == 200)} answered 200, "
        f"{len(sent.failures)} failed, {sent.ended_at - sent.started_at:.0f} s in all"),
        "",
        "What the figures are: the night's decision is in-sample (each candidate's time relative to the",
        "active profile, paired request by request over what it replayed that night, with an interval at",
        "the level its schedule of looks allows); there is no held-out truth on this box. The trivial",
        "baseline is keeping the active profile (autoregressive), which the tuner does unless a rival's",
        "whole interval is past the margin.",
        "",
        "## The budget",
        "",
        (f"The run fired at {datetime.fromtimestamp(fires_at, UTC):%H:%M:%S} UTC and recorded its decision "
         f"{night_s:.0f} s later, against a budget of {60.0 * args.budget_minutes:.0f} s "
         f"({'within' if night_s <= 60.0 * args.budget_minutes else 'OVER'} the budget): "
         f"{numbers.get('waited_idle_s', 0):.0f} s waiting for the idle window, {numbers.get('bench_s', 0):.0f} s "
         "benching, the rest switching back or on and verifying."),
        "",
        (f"Requests per profile: {', '.join(f'{k} {v}' for k, v in dict(numbers.get('samples') or {}).items())}; "
         f"sampling stopped because {numbers.get('stopped') or 'n/a'}; outcome: {numbers.get('outcome')}."),
        "",
        "## The next morning: `specd status`",
        "",
        "```",
        status.stdout.rstrip(),
        "```",
        "",
        "## `specd history --events`",
        "",
        "```",
        events.stdout.rstrip(),
        "```",
        "",
        "## `specd history` (the bench's steps have trigger `bench`; a switch the tuner chose, `tuner`)",
        "",
        "```",
        generations.stdout.rstrip(),
        "```",
        "",
        "## The nightly run's event, as `specd history --events --json` stores it",
        "",
        "```json",
        json.dumps(event, indent=1),
        "```",
        "",
    ]
    return "\n".join(lines)


def night_events_from(rows: list[dict[str, object]]) -> dict[str, object]:
    """The newest tuning event with its numbers parsed."""
    row = next(r for r in rows if str(r["kind"]).startswith("tune"))
    sentence, _, numbers = str(row["detail"]).partition(" | ")
    return {"at": row["at"], "kind": row["kind"], "sentence": sentence, "numbers": json.loads(numbers or "{}")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-capture", dest="capture", action="store_false")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--idle-s", type=float, default=60.0)
    parser.add_argument("--fire-in-s", type=float, default=30.0)
    parser.add_argument("--budget-minutes", type=float, default=30.0)
    parser.add_argument("--n", type=int, default=6)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "night.md")
    args = parser.parse_args()
    text = run(args)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
