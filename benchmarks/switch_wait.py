"""What a switch costs the clients: 8 streaming clients through the daemon's proxy while the real
tiny model is switched N times with each strategy (blue-green and restart, interleaved).

    .venv/bin/python benchmarks/switch_wait.py [--switches 10] [--clients 8] [--out benchmarks/results/switch-wait]

Everything is real: a private `systemd --user`, the real llama-server (CPU build) with the tiny
Gemma 3 270M model, `specd daemon` in its own process, `specd switch --strategy S` run as a user
runs it. The two profiles alternate (plain decoding and ngram-simple), `threads = 1` each so two
servers fit the box, `parallel = 8` so the 8 clients never queue for a slot. Each client loops:
POST /v1/completions (a base model: a code prompt), stream, 16 tokens, temperature 0.

Per request the client records when it was sent, its first token (TTFT), its end, the longest gap
between two chunks, and whether it ended in [DONE] with HTTP 200. The proxy records how long it
held each request at its gate (`held_ms` in the traffic table). A request is *during a switch*
when its life overlaps the `specd switch` command's; *baseline* when it starts and ends at least
`--settle` seconds away from every switch. Added wait is read two ways: the proxy's hold (what the
switch made the request wait, per request) and the TTFT quantiles of requests during switches
against the baseline's from the same run (the baseline is the truth for "without a switch").
Writes <out>.json (every request) and <out>.md (the summary, command, machine, date, load average).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from specd.setup.sandbox import PrivateSystemd, free_port, start_private_systemd

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("SPECD_CACHE") or Path.home() / ".cache" / "specd")
BINARY = CACHE / "llama-server" / "0.3.36-cpu" / "build" / "bin" / "llama-server"
MODEL = CACHE / "models" / "gemma-3-270m-q4_k_m.gguf"
PROFILES = ("autoregressive", "ngram-simple")
PROMPTS = ("def fibonacci(n):", "class Stack:\n    def __init__(self):", "def parse_csv(path):",
           "import json\n\ndef load(path):", "def binary_search(items, x):", "def merge(a, b):",
           "SELECT name FROM users WHERE", "def is_prime(n):")


@dataclass
class Request:
    client: int
    sent: float
    first: float | None = None
    end: float | None = None
    max_gap_ms: float = 0.0
    status: int = 0
    ok: bool = False
    error: str | None = None

    @property
    def ttft_ms(self) -> float | None:
        return None if self.first is None else 1000.0 * (self.first - self.sent)


@dataclass
class Switch:
    index: int
    strategy: str
    profile: str
    start: float
    end: float
    rc: int
    slot: str | None
    note: str


def _has_text(data: str) -> bool:
    try:
        choices = json.loads(data).get("choices") or [{}]
    except (ValueError, AttributeError):
        return False
    return bool(choices[0].get("text"))


def client_loop(index: int, url: str, stop: threading.Event, out: list[Request], tokens: int) -> None:
    with httpx.Client(timeout=httpx.Timeout(300.0, connect=10.0)) as client:
        turn = 0
        while not stop.is_set():
            body = {"model": "tiny", "prompt": PROMPTS[(index + turn) % len(PROMPTS)], "max_tokens": tokens,
                    "temperature": 0, "stream": True}
            turn += 1
            request = Request(index, time.monotonic())
            last = 0.0
            try:
                with client.stream("POST", f"{url}/v1/completions", json=body) as response:
                    request.status = response.status_code
                    buffer, done = "", False
                    for chunk in response.iter_text():
                        now = time.monotonic()
                        buffer += chunk
                        while "\n\n" in buffer:
                            event, buffer = buffer.split("\n\n", 1)
                            data = event.removeprefix("data: ").strip()
                            if data == "[DONE]":
                                done = True
                            elif data and request.first is None and _has_text(data):
                                request.first = last = now
                        if request.first is not None:
                            request.max_gap_ms = max(request.max_gap_ms, 1000.0 * (now - last))
                            last = now
                    request.ok = response.status_code == 200 and done and request.first is not None
                    if not request.ok:
                        request.error = f"HTTP {response.status_code}, done={done}: {buffer[-200:]!r}"
            except httpx.HTTPError as exc:
                request.error = f"{type(exc).__name__}: {exc}"
            request.end = time.monotonic()
            out.append(request)


@dataclass
class Box:
    manager: PrivateSystemd
    root: Path
    env: dict[str, str]
    proxy_port: int
    unit: str = "llama-bench.service"

    def specd(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "specd", *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout, check=False, cwd=str(REPO))

    @property
    def db(self) -> Path:
        state = self.env.get("XDG_STATE_HOME") or str(Path(self.env["HOME"]) / ".local" / "state")
        return Path(state) / "specd" / "specd.db"


def make_box(root: Path, clients: int, ctx_size: int | None = None) -> Box:
    """A private systemd, the tiny model's base/autoregressive/ngram-simple profiles and a specd.toml
    with the proxy and a spare port; `ctx_size` defaults to 512 tokens per client."""
    manager = start_private_systemd(root / "systemd")
    profiles = root / "profiles"
    profiles.mkdir()
    (profiles / "base.toml").write_text(
        f'abstract = true\nbinary = "{BINARY}"\nmodel = "{MODEL}"\nalias = "tiny"\nhost = "127.0.0.1"\n'
        f"port = {free_port()}\nctx_size = {ctx_size or 512 * clients}\nparallel = {clients}\nthreads = 1\n"
        "health_timeout_s = 120\nstability_s = 1\n")
    (profiles / "autoregressive.toml").write_text('inherits = "base"\n[speculative]\ntype = "none"\n')
    (profiles / "ngram-simple.toml").write_text('inherits = "base"\n[speculative]\ntype = "ngram-simple"\n'
                                                "draft_n_max = 16\n")
    proxy_port = free_port()
    config = root / "specd.toml"
    config.write_text(
        f'unit = "llama-bench.service"\nscope = "user"\nprofiles_dir = "{profiles}"\nlock_timeout_s = 60\n\n'
        f'[proxy]\nlisten = "127.0.0.1:{proxy_port}"\nhold_timeout_s = 120\nspare_port = {free_port()}\n\n'
        "[daemon]\nhealth_interval_s = 5\n\n[tuner]\nenabled = false\n")
    env = {**manager.env, "SPECD_CONFIG": str(config), "PYTHONPATH": str(REPO)}
    return Box(manager, root, env, proxy_port)


def wait_http(url: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer in {timeout_s:g} s")


def quantiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"n": 0, "p50": None, "p90": None, "p99": None, "max": None}
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)

    return {"n": len(ordered), "p50": round(statistics.median(ordered), 1), "p90": at(0.9), "p99": at(0.99),
            "max": round(ordered[-1], 1)}


def held_rows(box: Box) -> list[tuple[float, float, float]]:
    """(start on the proxy's wall clock, total_ms, held_ms) of every request the proxy recorded."""
    conn = sqlite3.connect(box.db)
    try:
        return [(float(ts), float(total), float(held)) for ts, total, held in
                conn.execute("SELECT ts, total_ms, held_ms FROM traffic WHERE endpoint = '/v1/completions'")]
    finally:
        conn.close()


def summarize(requests: list[Request], switches: list[Switch], held: list[tuple[float, float, float]],
              wall_offset: float, settle_s: float, warmup_end: float) -> dict[str, Any]:
    def overlaps(request: Request, switch: Switch, margin: float = 0.0) -> bool:
        assert request.end is not None
        return request.sent <= switch.end + margin and request.end >= switch.start - margin

    baseline = [r for r in requests if r.sent >= warmup_end and r.ok
                and not any(overlaps(r, s, settle_s) for s in switches)]
    base_ttft = quantiles([r.ttft_ms for r in baseline if r.ttft_ms is not None])
    quiet = [(s.start + wall_offset - settle_s, s.end + wall_offset + settle_s) for s in switches]
    first = warmup_end + wall_offset
    base_holds = [h for start, total, h in held if start >= first
                  and not any(start <= b and start + total / 1000.0 >= a for a, b in quiet)]
    report: dict[str, Any] = {"baseline": {"requests": len(baseline), "ttft_ms": base_ttft,
                                           "max_gap_ms": quantiles([r.max_gap_ms for r in baseline]),
                                           "proxy_held_ms": quantiles(base_holds)}}
    for strategy in ("blue-green", "restart"):
        mine = [s for s in switches if s.strategy == strategy]
        during = [r for r in requests if any(overlaps(r, s) for s in mine)]
        ttfts = [r.ttft_ms for r in during if r.ttft_ms is not None and r.ok]
        # the proxy's rows carry their start on the wall clock; a row belongs to a switch when its
        # request (start .. start + total) overlaps the switch command
        windows = [(s.start + wall_offset, s.end + wall_offset) for s in mine]
        holds = [h for start, total, h in held if any(start <= b and start + total / 1000.0 >= a for a, b in windows)]
        ttft_q = quantiles(ttfts)
        added = {k: (None if ttft_q[k] is None or base_ttft[k] is None else round(ttft_q[k] - base_ttft[k], 1))  # type: ignore[operator]
                 for k in ("p50", "p90", "p99", "max")}
        report[strategy] = {
            "switches": len(mine), "switches_failed": sum(1 for s in mine if s.rc != 0),
            "switch_s": quantiles([s.end - s.start for s in mine]),
            "requests_during": len(during), "failed": sum(1 for r in during if not r.ok),
            "failure_examples": [r.error for r in during if not r.ok][:5],
            "ttft_ms": ttft_q, "ttft_added_over_baseline_ms": added,
            "proxy_held_ms": quantiles(holds),
            "max_gap_ms": quantiles([r.max_gap_ms for r in during if r.ok]),
            "slots": sorted({s.slot or "?" for s in mine}),
        }
    report["all_requests"] = len(requests)
    report["all_failed"] = sum(1 for r in requests if not r.ok)
    return report


def run(args: argparse.Namespace) -> dict[str, Any]:
    for path in (BINARY, MODEL):
        if not path.exists():
            raise SystemExit(f"missing {path}: run scripts/build-llama-server.sh and scripts/get-test-model.sh")
    root = Path(tempfile.mkdtemp(prefix="specd-switch-wait-"))
    box = make_box(root, args.clients)
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
        wall_offset = time.time() - time.monotonic()
        stop, requests = threading.Event(), []  # type: threading.Event, list[Request]
        threads = [threading.Thread(target=client_loop, args=(i, url, stop, requests, args.tokens), daemon=True)
                   for i in range(args.clients)]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        time.sleep(args.warmup)
        warmup_end = time.monotonic()
        switches: list[Switch] = []
        for index in range(2 * args.switches):
            time.sleep(args.quiet)
            strategy = "blue-green" if index % 2 == 0 else "restart"
            profile = PROFILES[(index + 1) % 2]
            t0 = time.monotonic()
            result = box.specd("switch", profile, "--strategy", strategy, "--json")
            t1 = time.monotonic()
            try:
                document = json.loads(result.stdout)
                slot = (document.get("generation") or {}).get("slot")
                note = next((n for n in document.get("notes", []) if n.startswith("strategy:")), "")
            except ValueError:
                slot, note = None, result.stderr[-300:]
            switches.append(Switch(index, strategy, profile, t0, t1, result.returncode, slot, note))
            print(f"switch {index + 1}: {strategy:10} -> {profile:14} {t1 - t0:5.1f} s rc={result.returncode} "
                  f"slot={slot}", file=sys.stderr, flush=True)
        time.sleep(args.quiet)
        stop.set()
        for thread in threads:
            thread.join(300)
        elapsed = time.monotonic() - started
        time.sleep(2.0)  # the proxy writes traffic rows off the request path
        summary = summarize(requests, switches, held_rows(box), wall_offset, args.settle, warmup_end)
        summary["elapsed_s"] = round(elapsed, 1)
        return {"summary": summary, "switches": [asdict(s) for s in switches],
                "requests": [asdict(r) | {"ttft_ms": r.ttft_ms} for r in requests],
                "load_average_start": load_start, "load_average_end": os.getloadavg()}
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
    s = report["summary"]

    def row(name: str, part: dict[str, Any]) -> str:
        t, added, held = part["ttft_ms"], part["ttft_added_over_baseline_ms"], part["proxy_held_ms"]
        return (f"| {name} | {part['switches']} ({part['switches_failed']}) | {part['switch_s']['p50']} | "
                f"{part['requests_during']} | {part['failed']} | {t['p50']} / {t['p99']} / {t['max']} | "
                f"{added['p50']} / {added['p99']} / {added['max']} | {held['p50']} / {held['max']} | "
                f"{part['max_gap_ms']['max']} |")

    base = s["baseline"]
    load = report["load_average_start"], report["load_average_end"]
    return "\n".join([
        "# What a switch costs the clients: blue-green against restart",
        "",
        f"- command: `{command}`",
        (f"- machine: {platform.node()}: {platform.platform()}, {os.cpu_count()} CPUs; "
        f"load average (1/5/15 min) at start {load[0][0]:.2f}/{load[0][1]:.2f}/{load[0][2]:.2f}, at end "
        f"{load[1][0]:.2f}/{load[1][1]:.2f}/{load[1][2]:.2f} (the box is shared: other work ran)"),
        f"- date: {datetime.now(UTC).isoformat(timespec='seconds')}, specd {commit}",
        ("- server: the real llama-server 0.3.36 (CPU build), Gemma 3 270M Q4_K_M, `threads = 1`, `parallel = 8`; "
        "profiles autoregressive and ngram-simple alternate; the real `specd daemon` proxies"),
        (f"- clients: {report['clients']} streaming `/v1/completions` clients, {report['tokens']} tokens each, "
        "temperature 0, back to back"),
        "- raw: every request and switch in the JSON file beside this one",
        "",
        ("Truth for \"without a switch\": the baseline, requests of the same run that start and end at least "
        f"{report['settle']} s away from every switch ({base['requests']} requests; TTFT p50 / p99 / max "
        f"{base['ttft_ms']['p50']} / {base['ttft_ms']['p99']} / {base['ttft_ms']['max']} ms, longest gap between "
        f"chunks {base['max_gap_ms']['max']} ms, proxy held p50 / max {base['proxy_held_ms']['p50']} / "
        f"{base['proxy_held_ms']['max']} ms). *Added* is the quantile of requests during switches minus "
        "the same quantile of the baseline; *held* is how long the proxy kept a request before sending it on "
        "(per request, from its traffic table: its gate, plus the proxy's own scheduling)."),
        "",
        ("| strategy | switches (failed) | switch s p50 | requests during | failed | TTFT ms p50 / p99 / max | "
        "added ms p50 / p99 / max | held ms p50 / max | longest chunk gap ms |"),
        "|---|---|---|---|---|---|---|---|---|",
        row("blue-green", s["blue-green"]),
        row("restart", s["restart"]),
        "",
        f"All requests: {s['all_requests']}, failed {s['all_failed']}; {s['elapsed_s']} s.",
        "",
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--switches", type=int, default=10, help="switches per strategy (interleaved)")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument("--quiet", type=float, default=12.0, help="seconds of baseline traffic before each switch")
    parser.add_argument("--settle", type=float, default=2.0, help="baseline requests keep this far from switches")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "switch-wait")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped run still stops its systemd and servers
    command = "python benchmarks/switch_wait.py " + " ".join(sys.argv[1:])
    report = run(args)
    report.update(clients=args.clients, tokens=args.tokens, settle=args.settle, command=command)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                            check=False).stdout.strip()
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=1))
    args.out.with_suffix(".md").write_text(markdown(report, command, commit))
    print(json.dumps(report["summary"], indent=2))


if __name__ == "__main__":
    main()
