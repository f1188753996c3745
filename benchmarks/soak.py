"""Soak: many streaming clients through the real `specd daemon` proxy while profiles switch under them.

    python benchmarks/soak.py [--minutes 10] [--clients 64] [--switch-every-s 60] [--time-scale 0.05]

Everything is real except the model: a private `systemd --user` manager runs the deployment's unit,
`specd daemon` (the real one, in its own process) proxies 127.0.0.1, and `specd switch` alternates
two profiles every `--switch-every-s`, draining the proxy around each restart. The backend is
`specd-emulator` (a llama-server performance emulator, not a real server), whose streamed output
is a fixed token sequence for a given length and task class (`emulator_model.output_pieces`), so
every stream is checked piece by piece: a lost, duplicated or reordered chunk is counted.

Reports (JSON on stdout): requests, streams completed, failures (any stream that did not end in
[DONE] with the exact sequence), chunks lost/duplicated, switches made/failed, the daemon's RSS
over time (first/last/max and the slope over the second half), and whether the traffic table has
a row for every request. Exit status 0 when nothing was lost, duplicated or failed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from specd.emulator.model import output_pieces
from specd.setup.sandbox import PrivateSystemd, free_port, start_private_systemd

REPO = Path(__file__).resolve().parent.parent
EMULATOR = Path(sys.executable).parent / "specd-emulator"
CACHE = Path(os.environ.get("SPECD_CACHE") or Path.home() / ".cache" / "specd")
MODEL = CACHE / "models" / "gemma-3-270m-q4_k_m.gguf"  # only read by preflight; the emulator ignores it
PROFILES = {"plain": [], "mtp": ["--spec-type", "draft-mtp"]}
ASK = "Write a python function that adds two numbers"


@dataclass
class Tally:
    requests: int = 0
    completed: int = 0
    failures: list[str] = field(default_factory=list)
    chunks_expected: int = 0
    chunks_received: int = 0
    chunks_lost: int = 0
    chunks_duplicated: int = 0
    out_of_order: int = 0
    held_requests: int = 0

    def check(self, expected: list[str], got: list[str]) -> bool:
        """Count lost and duplicated pieces (multiset difference) and any reordering."""
        self.chunks_expected += len(expected)
        self.chunks_received += len(got)
        want, have = Counter(expected), Counter(got)
        self.chunks_lost += sum((want - have).values())
        self.chunks_duplicated += sum((have - want).values())
        if got != expected and want == have:
            self.out_of_order += 1
        return got == expected


def parse_stream(text: str) -> tuple[list[str], bool, str | None]:
    """Content pieces, whether [DONE] ended it, and the first error event's message."""
    pieces: list[str] = []
    done, error = False, None
    if not text.endswith("\n\n"):
        return pieces, False, f"stream ended mid-event: {text[-60:]!r}"
    for event in text.split("\n\n"):
        if not event:
            continue
        if not event.startswith("data: "):
            return pieces, False, f"not an SSE data event: {event[:60]!r}"
        payload = event[6:]
        if payload == "[DONE]":
            done = True
            continue
        document = json.loads(payload)
        if "error" in document:
            error = error or str(document["error"].get("message"))
            continue
        content = document["choices"][0]["delta"].get("content")
        if content is not None:
            pieces.append(content)
    return pieces, done, error


async def client_loop(index: int, url: str, stop: asyncio.Event, tally: Tally, max_tokens: int) -> None:
    rng = random.Random(index)
    async with httpx.AsyncClient(timeout=httpx.Timeout(300.0, connect=10.0)) as client:
        while not stop.is_set():
            tokens = rng.randint(max(1, max_tokens // 4), max_tokens)
            body = {"model": "soak", "messages": [{"role": "user", "content": f"{ASK} (client {index})"}],
                    "max_tokens": tokens, "stream": True}
            tally.requests += 1
            started = time.monotonic()
            try:
                async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
                    text = (await response.aread()).decode()
                    status = response.status_code
            except httpx.HTTPError as exc:
                tally.failures.append(f"client {index}: {type(exc).__name__}: {exc}")
                continue
            if time.monotonic() - started > 2.0:
                tally.held_requests += 1
            if status != 200:
                tally.failures.append(f"client {index}: HTTP {status}: {text[:200]}")
                continue
            pieces, done, error = parse_stream(text)
            intact = tally.check(output_pieces(tokens, "code"), pieces)
            if error or not done or not intact:
                tally.failures.append(f"client {index}: done={done} intact={intact} error={error}")
            else:
                tally.completed += 1


@dataclass
class Box:
    manager: PrivateSystemd
    root: Path
    env: dict[str, str]
    proxy_port: int
    unit: str = "llama-soak.service"

    def specd(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "specd", *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout, check=False, cwd=str(REPO))


def make_box(root: Path, time_scale: float, parallel: int) -> Box:
    manager = start_private_systemd(root / "systemd")
    profiles = root / "profiles"
    profiles.mkdir()
    (profiles / "base.toml").write_text(
        f'abstract = true\nbinary = "{EMULATOR}"\nmodel = "{MODEL}"\nalias = "soak"\nhost = "127.0.0.1"\n'
        f"port = {free_port()}\nctx_size = 65536\nparallel = {parallel}\nhealth_timeout_s = 60\nstability_s = 0.5\n")
    for name, extra in PROFILES.items():
        args = ["--emulator-time-scale", str(time_scale), *extra]
        (profiles / f"{name}.toml").write_text(f'inherits = "base"\nargs = {json.dumps(args)}\n')
    proxy_port = free_port()
    config = root / "specd.toml"
    config.write_text(
        f'unit = "llama-soak.service"\nscope = "user"\nprofiles_dir = "{profiles}"\nlock_timeout_s = 60\n\n'
        f'[proxy]\nlisten = "127.0.0.1:{proxy_port}"\nhold_timeout_s = 120\n\n'
        "[daemon]\nhealth_interval_s = 5\n\n[tuner]\nenabled = false\n")
    env = {**manager.env, "SPECD_CONFIG": str(config), "PYTHONPATH": str(REPO)}
    return Box(manager, root, env, proxy_port)


async def wait_http(url: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(timeout=2) as client:
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get(url)).status_code == 200:
                    return
            await asyncio.sleep(0.2)
    raise RuntimeError(f"{url} did not answer in {timeout_s:g} s")


def slope_mb_per_min(samples: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of RSS (MB) against time (minutes)."""
    if len(samples) < 3:
        return None
    ts = [t / 60.0 for t, _ in samples]
    ys = [y for _, y in samples]
    mean_t, mean_y = sum(ts) / len(ts), sum(ys) / len(ys)
    var = sum((t - mean_t) ** 2 for t in ts)
    return sum((t - mean_t) * (y - mean_y) for t, y in zip(ts, ys, strict=True)) / var if var else None


async def soak(box: Box, daemon: psutil.Process, args: argparse.Namespace) -> dict[str, Any]:
    url = f"http://127.0.0.1:{box.proxy_port}"
    await wait_http(f"{url}/health")
    tally, stop = Tally(), asyncio.Event()
    clients = [asyncio.create_task(client_loop(i, url, stop, tally, args.tokens)) for i in range(args.clients)]
    started = time.monotonic()
    end = started + 60.0 * args.minutes
    rss: list[tuple[float, float]] = []
    switches: list[dict[str, Any]] = []
    names = list(PROFILES)
    next_switch = started + args.switch_every_s
    while (now := time.monotonic()) < end:
        rss.append((now - started, daemon.memory_info().rss / 2**20))
        if now >= next_switch:
            target = names[(len(switches) + 1) % len(names)]
            t0 = time.monotonic()
            result = await asyncio.to_thread(box.specd, "switch", target)
            switches.append({"to": target, "rc": result.returncode, "s": round(time.monotonic() - t0, 2),
                             "at_s": round(t0 - started, 1), "stderr": result.stderr[-300:]})
            next_switch += args.switch_every_s
        await asyncio.sleep(min(5.0, max(0.1, end - time.monotonic())))
    stop.set()
    await asyncio.wait_for(asyncio.gather(*clients), 300)
    elapsed = time.monotonic() - started
    rss.append((elapsed, daemon.memory_info().rss / 2**20))
    second_half = [s for s in rss if s[0] >= elapsed / 2]
    return {
        "minutes": args.minutes, "clients": args.clients, "elapsed_s": round(elapsed, 1),
        "requests": tally.requests, "streams_completed": tally.completed, "failures": len(tally.failures),
        "failure_examples": tally.failures[:10], "chunks_expected": tally.chunks_expected,
        "chunks_received": tally.chunks_received, "chunks_lost": tally.chunks_lost,
        "chunks_duplicated": tally.chunks_duplicated, "streams_reordered": tally.out_of_order,
        "requests_over_2s": tally.held_requests,
        "switches": len(switches), "switches_failed": sum(1 for s in switches if s["rc"] != 0),
        "switch_s": [s["s"] for s in switches],
        "switch_errors": [s["stderr"] for s in switches if s["rc"] != 0][:3],
        "daemon_rss_mb": {"first": round(rss[0][1], 1), "after_1min": round(next(
            (y for t, y in rss if t >= 60), rss[-1][1]), 1), "last": round(rss[-1][1], 1),
            "max": round(max(y for _, y in rss), 1),
            "slope_second_half_mb_per_min": _round(slope_mb_per_min(second_half))},
        "daemon_cpu_s": round(sum(daemon.cpu_times()[:2]), 1),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def traffic_rows(box: Box) -> dict[str, Any]:
    result = box.specd("traffic", "--since", "1d", "--json")
    if result.returncode != 0:
        return {"error": result.stderr[-300:]}
    summary: dict[str, Any] = json.loads(result.stdout)
    return {"requests": summary["requests"], "failed": summary["failed"]}


def run(args: argparse.Namespace) -> dict[str, Any]:
    if not MODEL.exists():
        raise SystemExit(f"missing {MODEL}: run scripts/get-test-model.sh (preflight reads its GGUF header)")
    root = Path(tempfile.mkdtemp(prefix="specd-soak-"))
    box = make_box(root, args.time_scale, args.parallel)
    daemon: subprocess.Popen[bytes] | None = None
    try:
        first = box.specd("switch", "plain")
        if first.returncode != 0:
            raise SystemExit(f"specd switch plain failed:\n{first.stdout}\n{first.stderr}")
        with open(root / "daemon.log", "wb") as log:
            daemon = subprocess.Popen([sys.executable, "-m", "specd", "daemon"], env=box.env, cwd=str(REPO),
                                      stdout=log, stderr=subprocess.STDOUT)
        report = asyncio.run(soak(box, psutil.Process(daemon.pid), args))
        daemon.send_signal(signal.SIGTERM)
        report["daemon_exit"] = daemon.wait(60)
        report["traffic_table"] = traffic_rows(box)
        report["traffic_rows_match"] = report["traffic_table"].get("requests") == report["requests"]
        return report
    except BaseException:
        print((root / "daemon.log").read_text(errors="replace")[-4000:] if (root / "daemon.log").exists() else "",
              file=sys.stderr)
        raise
    finally:
        if daemon is not None and daemon.poll() is None:
            daemon.kill()
            daemon.wait()
        subprocess.run(["systemctl", "--user", "stop", box.unit], env=box.env, capture_output=True, check=False)
        box.manager.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--switch-every-s", type=float, default=60.0)
    parser.add_argument("--tokens", type=int, default=64, help="each request asks for 1/4..1 of this")
    parser.add_argument("--time-scale", type=float, default=0.05, help="the emulator's --emulator-time-scale")
    parser.add_argument("--parallel", type=int, default=8, help="the emulator's slots")
    args = parser.parse_args()
    report = run(args)
    print(json.dumps(report, indent=2))
    clean = (report["failures"] == 0 and report["chunks_lost"] == 0 and report["chunks_duplicated"] == 0
             and report["switches_failed"] == 0 and report["daemon_exit"] == 0)
    sys.exit(0 if clean else 1)


if __name__ == "__main__":
    main()
