"""Routing on the emulator: a mixed code + creative workload, routed against each single profile.

The llama-server performance EMULATOR (specd-emulator, the seeds' 3090 Ti tables: MTP +53% on code,
-9% on creative, and slower per stream under batching) runs as real HTTP servers: two with MTP
(`--spec-type draft-mtp`) and two plain. Clients talk to specd's real proxy (specd.proxy), set up
six ways, one at a time:

    single-mtp     one MTP server: what specd did before routing, if the tuner picked MTP
    single-plain   one plain server: ... if it picked plain
    pair-mtp       two MTP servers, requests to the less busy (the same memory as routing; a box
                   with a GPU per server)
    pair-plain     two plain servers, the same
    routed         one MTP and one plain server; the table LEARNED by specd.tune.routes from a bench
                   of both profiles on the training half of the requests (levels 1 and 4), the
                   router's load rule on
    oracle         the same two servers; each class to the profile the emulator's own model says is
                   faster for it (noise-free), no load rule: the per-class oracle

The workload is the built-in `code` and `creative` sets (specd/data/workloads), split before any
run: requests at even positions train the table, odd ones are measured (held out); each half
alternates code and creative requests. Each
repetition replays the held-out requests in file order through every configuration at each
concurrency (a closed loop of that many clients), the configurations in a rotated order; the
figure is the mix's wall clock (first request sent to last answer). Intervals are 95% t intervals
over repetitions of the paired ratio (routed / other in the same repetition).

CIRCULAR in one respect, said in the result file: the emulator decides a request's class with the
same classifier the router uses, so a misclassified request costs nothing here; the real-model run
(tests/system/test_routing.py and benchmarks/routing_real.py) has no such help.

    .venv/bin/python benchmarks/routing_emulator.py [--reps 10] [--time-scale 0.05] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from specd.daemon.service import Server, bind_tcp, new_event_loop
from specd.emulator.model import expected_wall_ms, load_model
from specd.proxy.proxy import Backend, Proxy, ProxySettings
from specd.proxy.routes import Companion, Router, RouteSet
from specd.routing.table import Route, RoutingTable, describe
from specd.setup.sandbox import free_port
from specd.traffic.taskclass import TASK_CLASSES, TaskClass, classify
from specd.tune.bench import Reply, Settings, bench_profiles
from specd.tune.routes import learn
from specd.tune.workloads import Workload, WorkloadRequest, load_workload

REPO = Path(__file__).resolve().parent.parent
MODES = {"mtp": "draft-mtp", "plain": "none"}
CONFIGS = ("single-mtp", "single-plain", "pair-mtp", "pair-plain", "routed", "oracle")


def configs_at(level: int) -> tuple[str, ...]:
    """Two servers of one profile are one server when a single request is in flight: pairs at level >= 2."""
    return CONFIGS if level >= 2 else tuple(c for c in CONFIGS if not c.startswith("pair-"))


def start_emulator(port: int, spec_type: str, seed: int, scale: float) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "specd.emulator.server", "--port", str(port), "--alias", "emu", "--spec-type",
         spec_type, "--emulator-time-scale", str(scale), "--parallel", "4", "--seed", str(seed), "--metrics"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def wait_up(url: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


class ProxyThread:
    """specd's proxy on its own loop in a thread, as the daemon runs it."""

    def __init__(self, primary: Backend, routes: RouteSet) -> None:
        self.port = free_port()
        self.proxy = Proxy(ProxySettings(health_poll_s=0.05, unit="bench"), lambda: primary,
                           router=Router(lambda: routes))
        self.server: Server = self.proxy.server(grace_s=5)
        self.loop = new_event_loop()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        while not self.server.started:
            time.sleep(0.01)

    def _run(self) -> None:
        self.loop.run_until_complete(self.server.serve([bind_tcp("127.0.0.1", self.port)]))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


class FleetTarget:
    """The bench's target for learning: each profile is one emulator server, reached directly."""

    concurrent = True

    def __init__(self, urls: Mapping[str, str]) -> None:
        self.urls, self.current = dict(urls), None
        self.http = httpx.Client(timeout=600, limits=httpx.Limits(max_connections=32))

    def active(self) -> str | None:
        return self.current

    def activate(self, profile: str) -> None:
        self.current = profile  # type: ignore[assignment]

    endpoint = "/v1/chat/completions"

    def sent(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """What goes on the wire for a bench body (a subclass may reshape it)."""
        return dict(body)

    def complete(self, body: Mapping[str, Any], in_flight: int = 1) -> Reply:
        assert self.current is not None
        started = time.perf_counter()
        answer = self.http.post(f"{self.urls[self.current]}{self.endpoint}", json=self.sent(body))
        answer.raise_for_status()
        return Reply(answer.json(), 1000.0 * (time.perf_counter() - started))

    def vram_bytes(self) -> int | None:
        return None


def stop_all(proxies: Iterable[ProxyThread], processes: Sequence[subprocess.Popen[bytes]]) -> None:
    for proxy in proxies:
        proxy.stop()
    for process in processes:
        process.terminate()
    for process in processes:
        process.wait(30)


def split() -> tuple[list[WorkloadRequest], list[WorkloadRequest]]:
    """Training (even positions of each file) and held-out (odd) requests, fixed before any run; each
    half interleaves the two sets (code, creative, code, ...), so a mix replayed at a level has both
    classes in flight together, as a box serving an agent and a chat UI does."""
    halves: dict[int, list[list[WorkloadRequest]]] = {0: [], 1: []}
    for name in ("code", "creative"):
        requests = load_workload(name).requests
        for parity in (0, 1):
            halves[parity].append([r for i, r in enumerate(requests) if i % 2 == parity])
    train, held = ([r for pair in zip(*halves[p], strict=True) for r in pair] for p in (0, 1))
    return train, held


def truth_table(requests: Sequence[WorkloadRequest]) -> RoutingTable:
    """Per class, the profile the emulator's model says is faster on these requests (noise-free)."""
    model = load_model()
    routes: dict[TaskClass, Route] = {}
    for task_class in TASK_CLASSES:
        mine = [r for r in requests if classify(list(r.body["messages"])) == task_class]
        if not mine:
            continue
        totals = {name: sum(expected_wall_ms(model.mode("mtp" if name == "mtp" else "none"), r.prompt_tokens,
                                             r.max_tokens, task_class) for r in mine) for name in MODES}
        best = min(totals, key=lambda name: totals[name])
        routes[task_class] = Route(best, f"the emulator's model: {totals[best]:.0f} vs "
                                         f"{max(totals.values()):.0f} ms over the class's requests")
    return RoutingTable(routes=routes, margin=0.05)


def learned_table(urls: Mapping[str, str], train: Sequence[WorkloadRequest], levels: Sequence[int]) -> RoutingTable:
    target = FleetTarget(urls)
    workload = Workload("train", tuple(train), origin="builtin")
    rows: dict[str, list[Any]] = {name: [] for name in MODES}
    offset = 0  # each level's bench numbers its plan from 0: the next one's positions and rounds follow on
    for level in levels:
        report = bench_profiles(target, list(MODES), workload, Settings(n=2 * len(train), concurrency=level,
                                                                         early_stop=False, cache_reuse=False))
        for name in MODES:
            rows[name] += [replace(r, position=r.position + offset, round=r.round + offset)
                           for r in report.results.get(name, [])]
        offset += 10_000
    return learn(rows, RoutingTable(), active="mtp", margin=0.05, source=f"bench of {len(train)} training "
                 f"requests x 2 at levels {', '.join(map(str, levels))}", now=time.time()).table


def run_mix(url: str, requests: Sequence[WorkloadRequest], concurrency: int) -> tuple[float, int]:
    """Closed loop of `concurrency` clients over the requests in order: (seconds, failed requests)."""
    bodies = [{**r.body, "model": "emu", "cache_prompt": False, "stream": False} for r in requests]
    cursor, failed, lock = [0], [0], threading.Lock()

    def client() -> None:
        with httpx.Client(timeout=600) as http:
            while True:
                with lock:
                    index = cursor[0]
                    cursor[0] += 1
                if index >= len(bodies):
                    return
                try:
                    ok = http.post(f"{url}/v1/chat/completions", json=bodies[index]).status_code == 200
                except httpx.HTTPError:
                    ok = False
                if not ok:
                    with lock:
                        failed[0] += 1

    started = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started, failed[0]


# 97.5% quantiles of Student's t for 1-30 degrees of freedom (normal beyond): the 95% two-sided interval.
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


@dataclass(frozen=True)
class Interval:
    mean: float
    lo: float
    hi: float


def t_interval(values: Sequence[float]) -> Interval:
    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else math.inf
    quantile = T975[n - 2] if 1 < n <= len(T975) + 1 else 1.96
    half = quantile * sd / math.sqrt(n) if n > 1 else math.inf
    return Interval(mean, mean - half, mean + half)


def ratio_interval(ours: Sequence[float], theirs: Sequence[float]) -> Interval:
    """exp of the mean paired log ratio and its 95% t interval over repetitions."""
    logs = t_interval([math.log(a / b) for a, b in zip(ours, theirs, strict=True)])
    return Interval(math.exp(logs.mean), math.exp(logs.lo), math.exp(logs.hi))


def machine() -> str:
    load = os.getloadavg()
    return (f"`{' '.join(platform.uname())}`, {os.cpu_count()} cores, load average "
            f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=8)
    parser.add_argument("--time-scale", type=float, default=0.1)
    parser.add_argument("--levels", default="1,4")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks/results/routing.md")
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    machine_before = machine()
    started_at = datetime.now(UTC)
    ports = {key: free_port() for key in ("mtp-a", "mtp-b", "plain-a", "plain-b")}
    urls = {key: f"http://127.0.0.1:{port}" for key, port in ports.items()}
    procs = [start_emulator(port, MODES[key.split("-")[0]], seed, args.time_scale)
             for seed, (key, port) in enumerate(ports.items())]
    proxies: dict[str, ProxyThread] = {}
    try:
        for url in urls.values():
            wait_up(url)
        train, held = split()
        truth = truth_table(held)
        table = learned_table({"mtp": urls["mtp-a"], "plain": urls["plain-a"]}, train, levels)
        all_mtp = {c: Route("mtp", "all") for c in TASK_CLASSES}
        all_plain = {c: Route("plain", "all") for c in TASK_CLASSES}
        static = RoutingTable(routes=truth.routes, margin=truth.margin)
        proxies = {
            "single-mtp": ProxyThread(Backend(urls["mtp-a"], "mtp"), RouteSet()),
            "single-plain": ProxyThread(Backend(urls["plain-a"], "plain"), RouteSet()),
            "pair-mtp": ProxyThread(Backend(urls["mtp-a"], "mtp"), RouteSet(
                True, (Companion(urls["mtp-b"], "mtp"),), RoutingTable(routes=all_mtp))),
            "pair-plain": ProxyThread(Backend(urls["plain-a"], "plain"), RouteSet(
                True, (Companion(urls["plain-b"], "plain"),), RoutingTable(routes=all_plain))),
            "routed": ProxyThread(Backend(urls["mtp-a"], "mtp"), RouteSet(
                True, (Companion(urls["plain-a"], "plain"),), table)),
            "oracle": ProxyThread(Backend(urls["mtp-a"], "mtp"), RouteSet(
                True, (Companion(urls["plain-a"], "plain"),), static, busy_at=10_000)),
        }
        walls: dict[tuple[str, int], list[float]] = {(c, lv): [] for lv in levels for c in configs_at(lv)}
        failures = 0
        for rep in range(args.reps):
            for level in levels if rep % 2 == 0 else list(reversed(levels)):
                here = configs_at(level)
                for config in here[rep % len(here):] + here[:rep % len(here)]:
                    seconds, failed = run_mix(proxies[config].url, held, level)
                    walls[config, level].append(seconds)
                    failures += failed
            print(f"rep {rep + 1}/{args.reps} done", file=sys.stderr, flush=True)
        routed_counts = proxies["routed"].proxy.router.status()["routed"] if proxies["routed"].proxy.router else {}
    finally:
        stop_all(proxies.values(), procs)
    write(args, levels, walls, table, truth, held, failures, routed_counts, machine_before, started_at)


NOTES = [
    "## What this shows, and what it does not", "",
    ("- Truth and circularity: the wall clocks are the emulator's, from the seeds' 3090 Ti tables (MTP +53% on "
    "code, -9% on creative, slower per stream under batching); the oracle's table is that model's noise-free "
    "answer. The emulator decides a request's class with the classifier the router uses, so a misclassified "
    "request costs nothing here; the real-model run (routing-real.md) has no such help."),
    "- Held out: the table was learned on the training half and every figure is on the other half.",
    ("- Trivial baselines on the same requests: one profile for everything (single-*, what specd did before "
    "routing, at best), and at concurrency 4 two servers of one profile (pair-*, the same memory as routing)."),
    ("- Each emulated server models a GPU of its own (a profile per GPU on a two-GPU box); two servers sharing "
    "one GPU would share its compute, which the emulator does not model."),
    ("- The load rule: a request leaves its route only when the routed server is busy and the table's ratio "
    "times the measured slowdown says another answers sooner by the margin; the counts above say whether it "
    "fired on this mix (\"load\" entries)."), ""]


def write(args: argparse.Namespace, levels: Sequence[int], walls: Mapping[tuple[str, int], list[float]],
          table: RoutingTable, truth: RoutingTable, held: Sequence[WorkloadRequest], failures: int,
          routed_counts: Mapping[str, int], machine_before: str, started_at: datetime) -> None:
    lines = ["# Routing on the emulator: routed vs each single profile and the per-class oracle", "",
             (f"**Command:** `.venv/bin/python benchmarks/routing_emulator.py --reps {args.reps} --time-scale "
             f"{args.time_scale} --levels {args.levels}` (specd-emulator, the seeds' 3090 Ti model, times "
             f"scaled by {args.time_scale}; every figure below is in the emulator's modelled seconds divided "
             "back by the scale)."), "",
             f"Date: {started_at:%Y-%m-%d %H:%M} UTC. Machine before: {machine_before}. After: {machine()}.", "",
             (f"Held-out mix: {len(held)} requests ({sum(1 for r in held if r.task_class == 'code')} code, "
             f"{sum(1 for r in held if r.task_class == 'creative')} creative; max_tokens "
              f"{min(r.max_tokens for r in held)}-{max(r.max_tokens for r in held)}), the odd "
             "positions of the built-in `code` and `creative` sets, alternating; the table was learned on the even "
             f"positions. Failed requests over every run: {failures}."), "",
             "## The learned table (training half)", "", "```", *describe(table), "```", "",
             "Per-class oracle (the emulator's own noise-free model on the held-out requests):", "", "```",
             *describe(truth), "```", ""]
    result: dict[str, Any] = {"levels": {}, "table": table.as_json(), "truth": truth.as_json(),
                              "routed_counts": dict(routed_counts), "failures": failures}
    for level in levels:
        here = configs_at(level)
        scaled = {c: [w / args.time_scale for w in walls[c, level]] for c in here}
        means = {c: t_interval(v) for c, v in scaled.items()}
        best_single = min(("single-mtp", "single-plain"), key=lambda c: means[c].mean)
        vs_single = ratio_interval(scaled["routed"], scaled[best_single])
        vs_oracle = ratio_interval(scaled["routed"], scaled["oracle"])
        lines += [f"## Concurrency {level}", "",
                  "| configuration | mix wall clock, s (mean, 95% interval) |", "|---|---|"]
        for config in here:
            m = means[config]
            lines.append(f"| {config} | {m.mean:.1f} ({m.lo:.1f}-{m.hi:.1f}) |")
        lines += ["",
                  f"- routed / {best_single} (the best single profile): **{vs_single.mean:.3f}** "
                  f"(95% interval {vs_single.lo:.3f}-{vs_single.hi:.3f}): "
                  f"{100 * (1 - vs_single.mean):.1f}% faster"
                  + (", the whole interval below 1" if vs_single.hi < 1 else ", the interval reaches 1"),
                  f"- routed / oracle: {vs_oracle.mean:.3f} ({vs_oracle.lo:.3f}-{vs_oracle.hi:.3f})"
                  + (": within 5% (the whole interval below 1.05)" if vs_oracle.hi <= 1.05
                     else ": NOT shown within 5% (the interval reaches past 1.05)")]
        entry: dict[str, Any] = {
            "means_s": {c: [m.mean, m.lo, m.hi] for c, m in means.items()}, "samples_s": scaled,
            "best_single": best_single, "routed_vs_best_single": [vs_single.mean, vs_single.lo, vs_single.hi],
            "routed_vs_oracle": [vs_oracle.mean, vs_oracle.lo, vs_oracle.hi]}
        if "pair-mtp" in here:
            best_pair = min(("pair-mtp", "pair-plain"), key=lambda c: means[c].mean)
            vs_pair = ratio_interval(scaled["routed"], scaled[best_pair])
            lines.append(f"- routed / {best_pair} (two servers of the best profile, the same memory as routing): "
                         f"{vs_pair.mean:.3f} ({vs_pair.lo:.3f}-{vs_pair.hi:.3f})")
            entry.update(best_pair=best_pair, routed_vs_best_pair=[vs_pair.mean, vs_pair.lo, vs_pair.hi])
        lines.append("")
        result["levels"][str(level)] = entry
    lines += [f"Requests the routed proxy sent, by profile and reason: {json.dumps(dict(routed_counts))}.", "",
              *NOTES]
    args.out.write_text("\n".join(lines), encoding="utf-8")
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    asyncio.set_event_loop_policy(None)
    main()
