"""How often the tuner picks the right profile on the REAL tiny llama-server, against a held-out truth.

The truth is not the tuner's own model, nor the emulator: for every case (a workload kind x an
output length) each example profile of profiles/tiny is measured exhaustively on HELD-OUT prompts
(every prompt, every profile, `--reps` times, interleaved request by request, so load drift on the
shared box hits every profile alike). The tuner then decides the way `specd tune` does
(specd.tune.tuner.tune: interleaved rounds, early stopping, the [tuner] defaults n and margin,
the box starting on autoregressive) on a SEPARATE sample of prompts from the same generator.

Scored per case: the tuner's final profile against the truth's best, where every profile whose
paired bootstrap interval (over held-out prompts) of "mean wall clock / best's" reaches 1.0 counts
as tied with the best (noise cannot tell them apart); regret = truth(pick) / truth(best) - 1. The
same is scored for two baselines that need no tuner: always autoregressive (plain), and always the
one profile fastest on average over all cases (chosen with the truth itself: a baseline with an
oracle's advantage).

Each profile runs as its own llama-server process (the argv specd renders for it), all four
resident, so the tuner's "switch" is a change of port rather than a systemd restart: what is
measured is the decision, not the restart. Every profile runs with `--threads` (default 1, not
profiles/tiny's 2): on the shared 2-core box, loaded by other jobs, two threads per server spin
on each other and decode collapses to a few tokens a second, which would measure the box's
scheduler rather than the profiles. Requests are text completions (/v1/completions): the
tiny model is a base model. The fidelity gate (`specd verify`) is not run: it can only veto a
switch, never cause one.

    .venv/bin/python benchmarks/tuner_accuracy_real.py [--heldout 6] [--reps 2] [--short 32] [--long 128]
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
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import tomlkit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from text_workloads import GENERATORS, TASK_CLASS

from specd.profiles.config import TunerConfig
from specd.profiles.flags import binary_flags
from specd.profiles.load import load_profile
from specd.setup.sandbox import free_port
from specd.tune.bench import Settings, request_body
from specd.tune.targets import Reply
from specd.tune.tuner import tune
from specd.tune.workloads import Workload, WorkloadRequest
from specd.unit.render import build_argv

REPO = Path(__file__).resolve().parent.parent
PROFILES = ("autoregressive", "ngram-simple", "ngram-mod", "draft")
PLAIN = "autoregressive"
BOOTSTRAP = 4000


class ServerSetTarget:
    """One resident llama-server per profile; `activate` points requests at that profile's port."""

    concurrent = True

    def __init__(self, ports: Mapping[str, int], active: str) -> None:
        self.ports, self._active = dict(ports), active
        self.http = httpx.Client(timeout=httpx.Timeout(600.0, connect=5.0))

    def active(self) -> str | None:
        return self._active

    def activate(self, profile: str) -> None:
        self._active = profile

    def complete(self, body: Mapping[str, Any], in_flight: int = 1) -> Reply:
        """The chat-shaped bench body as a text completion: the messages' contents are the prompt."""
        prompt = "\n\n".join(str(m["content"]) for m in body["messages"])
        sent = {k: v for k, v in body.items() if k != "messages"} | {"prompt": prompt, "model": "tiny"}
        started = time.perf_counter()
        answer = self.http.post(f"http://127.0.0.1:{self.ports[self._active]}/v1/completions", json=sent)
        wall_ms = 1000.0 * (time.perf_counter() - started)
        answer.raise_for_status()
        return Reply(answer.json(), wall_ms)

    def vram_bytes(self) -> int | None:
        return None


@dataclass
class LoadSampler:
    """The 1-minute load average every few seconds, so the result file says how busy the box was."""

    samples: list[tuple[float, float]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> LoadSampler:
        threading.Thread(target=self._run, daemon=True).start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.time(), os.getloadavg()[0]))
            self._stop.wait(5.0)

    def between(self, start: float, end: float) -> dict[str, float]:
        values = [load for at, load in self.samples if start <= at <= end] or [os.getloadavg()[0]]
        return {"min": min(values), "mean": round(sum(values) / len(values), 2), "max": max(values)}

    def stop(self) -> None:
        self._stop.set()


def start_servers(root: Path, threads: int) -> tuple[dict[str, int], list[subprocess.Popen[bytes]]]:
    profiles_dir = root / "profiles"
    shutil.copytree(REPO / "profiles" / "tiny", profiles_dir)
    base = tomlkit.parse((profiles_dir / "base.toml").read_text())
    base["threads"] = threads
    (profiles_dir / "base.toml").write_text(tomlkit.dumps(base))
    ports: dict[str, int] = {}
    processes: list[subprocess.Popen[bytes]] = []
    for name in PROFILES:
        path = profiles_dir / f"{name}.toml"
        document = tomlkit.parse(path.read_text())
        ports[name] = document["port"] = free_port()
        path.write_text(tomlkit.dumps(document))
        profile = load_profile(profiles_dir, name)
        argv = build_argv(profile, binary_flags(profile.binary))
        log = open(root / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        processes.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT))
    deadline = time.monotonic() + 180
    for name, port in ports.items():
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"{name} never turned healthy: {(root / f'{name}.log').read_text()[-2000:]}")
            time.sleep(0.5)
    return ports, processes


def distinct_prompts(kind: str, count: int, first_seed: int, exclude: set[str]) -> list[str]:
    found: list[str] = []
    seed = first_seed
    while len(found) < count:
        prompt = GENERATORS[kind](seed)
        if prompt not in exclude and prompt not in found:
            found.append(prompt)
        seed += 1
    return found


def workload(name: str, kind: str, prompts: Sequence[str], max_tokens: int) -> Workload:
    return Workload(name, tuple(
        WorkloadRequest(body={"messages": [{"role": "user", "content": p}], "max_tokens": max_tokens},
                        task_class=TASK_CLASS[kind])  # type: ignore[arg-type]
        for p in prompts))


def measure_truth(target: ServerSetTarget, held_out: Workload, reps: int) -> dict[str, Any]:
    """walls[profile][prompt][rep]: every held-out prompt on every profile, interleaved request by request."""
    settings = Settings()
    walls = {p: [[0.0] * reps for _ in held_out.requests] for p in PROFILES}
    tokens = {p: [0] * len(held_out.requests) for p in PROFILES}
    for rep in range(reps):
        for index, request in enumerate(held_out.requests):
            shift = (index + rep) % len(PROFILES)
            order = PROFILES[shift:] + PROFILES[:shift]
            for profile in order if rep % 2 == 0 else tuple(reversed(order)):
                target.activate(profile)
                reply = target.complete(request_body(request, settings))
                walls[profile][index][rep] = reply.wall_ms
                tokens[profile][index] = int(reply.payload.get("usage", {}).get("completion_tokens", 0))
    return {"walls": walls, "output_tokens": tokens}


def judge(walls: Mapping[str, list[list[float]]], seed: int = 0) -> dict[str, Any]:
    """Means per profile, the best, and which profiles noise cannot tell from it (paired bootstrap over prompts)."""
    per_prompt = {p: np.array([np.mean(reps) for reps in rows]) for p, rows in walls.items()}
    means = {p: float(v.mean()) for p, v in per_prompt.items()}
    best = min(means, key=means.__getitem__)
    rng = np.random.default_rng(seed)
    count = len(per_prompt[best])
    picks = rng.integers(0, count, size=(BOOTSTRAP, count))
    intervals: dict[str, list[float]] = {}
    tied = [best]
    for profile, values in per_prompt.items():
        if profile == best:
            continue
        ratios = values[picks].sum(axis=1) / per_prompt[best][picks].sum(axis=1)
        lo, hi = np.quantile(ratios, [0.025, 0.975])
        intervals[profile] = [round(float(lo), 4), round(float(hi), 4)]
        if lo <= 1.0:
            tied.append(profile)
    return {"mean_ms": means, "best": best, "tied_with_best": tied, "ratio_ci95_vs_best": intervals}


def score(pick: str, truth: Mapping[str, Any]) -> dict[str, Any]:
    means = truth["mean_ms"]
    return {"pick": pick, "right": pick in truth["tied_with_best"],
            "regret": means[pick] / means[truth["best"]] - 1.0}


def run_case(target: ServerSetTarget, sampler: LoadSampler, kind: str, max_tokens: int, args: argparse.Namespace,
             tuner: TunerConfig) -> dict[str, Any]:
    name = f"{kind}/{max_tokens}"
    held_prompts = distinct_prompts(kind, args.heldout, 1000, set())
    sample_prompts = distinct_prompts(kind, tuner.n, 0, set(held_prompts))
    started = time.time()
    decisions = []
    for run in range(args.tuner_runs):
        target.activate(PLAIN)
        result = tune(target, list(PROFILES), workload(f"{name}-sample", kind, sample_prompts, max_tokens),
                      Settings(n=tuner.n, seed=42 + run), margin=tuner.margin)
        used = {p: len(rows) for p, rows in result.report.results.items()}
        decisions.append({"final_profile": result.final_profile or PLAIN, "reason": result.decision.reason,
                          "requests_per_profile": used, "bench_s": round(result.report.elapsed_s, 1),
                          "estimates_ms": {e.profile: [round(e.median_ms, 1), round(e.ci_lo_ms, 1),
                                                       round(e.ci_hi_ms, 1)] for e in result.decision.estimates}})
    tuned = time.time()
    truth_data = measure_truth(target, workload(f"{name}-heldout", kind, held_prompts, max_tokens), args.reps)
    ended = time.time()
    truth = judge(truth_data["walls"])
    print(f"{name}: truth best {truth['best']} (tied {truth['tied_with_best']}), tuner "
          f"{[d['final_profile'] for d in decisions]}, {ended - started:.0f} s, load "
          f"{sampler.between(started, ended)}", file=sys.stderr, flush=True)
    return {"case": name, "kind": kind, "max_tokens": max_tokens, "truth": truth, "tuner": decisions,
            "truth_samples": truth_data, "seconds": {"tuner": round(tuned - started), "truth": round(ended - tuned)},
            "load_1min": sampler.between(started, ended)}


def summarise(cases: list[dict[str, Any]]) -> dict[str, Any]:
    ratios = {p: float(np.exp(np.mean([np.log(c["truth"]["mean_ms"][p] / c["truth"]["mean_ms"][c["truth"]["best"]])
                                       for c in cases]))) for p in PROFILES}
    fastest = min(ratios, key=ratios.__getitem__)
    rows: dict[str, list[dict[str, Any]]] = {"tuner": [], "always autoregressive": [], f"always {fastest}": []}
    for case in cases:
        truth = case["truth"]
        rows["tuner"].extend(score(d["final_profile"], truth) for d in case["tuner"])
        rows["always autoregressive"].append(score(PLAIN, truth))
        rows[f"always {fastest}"].append(score(fastest, truth))
    table = {who: {"right": sum(s["right"] for s in scored), "of": len(scored),
                   "mean_regret": float(np.mean([s["regret"] for s in scored])),
                   "max_regret": float(max(s["regret"] for s in scored))} for who, scored in rows.items()}
    return {"fastest_on_average": fastest, "geomean_ratio_to_best": ratios, "scores": table,
            "ties": sum(len(c["truth"]["tied_with_best"]) > 1 for c in cases)}


def markdown(result: dict[str, Any]) -> str:
    meta, summary = result["meta"], result["summary"]
    lines = [
        "# Tuner accuracy on the real tiny llama-server, scored against a held-out truth",
        "",
        f"- command: `{meta['command']}`",
        (f"- machine: {meta['machine']}; shared with other jobs: 1-min load average over the run "
        f"{meta['load_1min']['min']:.2f}-{meta['load_1min']['max']:.2f} (mean {meta['load_1min']['mean']:.2f}), "
        "per case below"),
        f"- date: {meta['date']}, specd {meta['commit']}, {meta['minutes']:.0f} minutes",
        ("- server: llama-server (llama.cpp from the llama-cpp-python 0.3.36 sdist, CPU), Gemma 3 270M Q4_K_M "
        "(a base model: text completions on /v1/completions), the profiles of profiles/tiny, one resident "
        f"server per profile, every profile at --threads {meta['threads']} (profiles/tiny says 2: on this "
        "shared, loaded 2-core box two spinning threads per server collapse decode)"),
        (f"- truth: every profile on {meta['heldout']} HELD-OUT prompts per case x {meta['reps']} repetitions, "
        "interleaved request by request; truth = mean wall clock; profiles whose paired bootstrap 95% "
        "interval of (mean / best's mean) over the held-out prompts reaches 1.0 are counted as TIED with the best"),
        (f"- tuner: specd.tune.tuner.tune with the [tuner] defaults (n = {meta['tuner_n']}, margin = "
        f"{meta['tuner_margin']}), early stopping, starting on autoregressive, on {meta['tuner_n']} other "
        "prompts from the same generator (disjoint from the held-out ones); a right pick = a profile tied "
        "with the best"),
        "- raw: [tuner-accuracy-real.json](tuner-accuracy-real.json)",
        "",
        "| who picks | right picks | mean regret | worst regret |",
        "|---|---|---|---|",
    ]
    for who, row in summary["scores"].items():
        lines.append(f"| {who} | {row['right']}/{row['of']} ({row['right'] / row['of']:.0%}) | "
                     f"{row['mean_regret']:+.1%} | {row['max_regret']:+.1%} |")
    lines += [
        "",
        (f"`always {summary['fastest_on_average']}` is the profile with the lowest geometric-mean ratio to the "
        "best over all cases, chosen with the truth itself (an oracle's advantage for that baseline). "
        f"Cases whose best is a tie: {summary['ties']} of {len(result['cases'])}."),
        "",
        ("| case | truth: mean wall ms per profile | best | tied with best | tuner's pick (requests per profile) "
        "| load 1-min |"),
        "|---|---|---|---|---|---|",
    ]
    for case in result["cases"]:
        truth = case["truth"]
        means = ", ".join(f"{p} {truth['mean_ms'][p]:.0f}" for p in PROFILES)
        picks = "; ".join(f"{d['final_profile']} "
                          f"({', '.join(str(d['requests_per_profile'].get(p, 0)) for p in PROFILES)})"
                          for d in case["tuner"])
        load = case["load_1min"]
        lines.append(f"| {case['case']} | {means} | {truth['best']} | {', '.join(truth['tied_with_best'])} | "
                     f"{picks} | {load['min']:.1f}-{load['max']:.1f} |")
    lines += ["", "Tuner reasons:", ""]
    lines += [f"- {case['case']}: {d['reason']}" for case in result["cases"] for d in case["tuner"]]
    lines += ["", "Output tokens (median over held-out prompts, autoregressive): " + ", ".join(
        f"{c['case']} {int(np.median(c['truth_samples']['output_tokens'][PLAIN]))}" for c in result["cases"]), ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heldout", type=int, default=6, help="held-out prompts per case")
    parser.add_argument("--reps", type=int, default=2, help="repetitions of each held-out prompt per profile")
    parser.add_argument("--tuner-runs", type=int, default=1)
    parser.add_argument("--short", type=int, default=32)
    parser.add_argument("--long", type=int, default=128)
    parser.add_argument("--kinds", nargs="*", default=list(GENERATORS))
    parser.add_argument("--threads", type=int, default=1,
                        help="llama-server threads for every profile (profiles/tiny says 2; see the module doc)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args()
    tuner = TunerConfig()
    root = Path(tempfile.mkdtemp(prefix="specd-tuner-truth-"))
    sampler = LoadSampler().start()
    started = time.time()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the servers on the way out
    ports, processes = start_servers(root, args.threads)
    try:
        target = ServerSetTarget(ports, PLAIN)
        for profile in PROFILES:  # first requests pay page faults: keep them out of every measurement
            target.activate(profile)
            target.complete({"messages": [{"content": "Warm-up."}], "max_tokens": 8, "temperature": 0})
        cases = [run_case(target, sampler, kind, length, args, tuner)
                 for kind in args.kinds for length in (args.short, args.long)]
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=30)
        sampler.stop()
        shutil.rmtree(root, ignore_errors=True)
    ended = time.time()
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip()
    meta = {"command": " ".join([".venv/bin/python", "benchmarks/tuner_accuracy_real.py", *sys.argv[1:]]),
            "machine": f"{platform.platform()}, {os.cpu_count()} CPUs",
            "date": datetime.fromtimestamp(started, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "commit": commit, "minutes": (ended - started) / 60, "heldout": args.heldout, "reps": args.reps,
            "tuner_n": tuner.n, "tuner_margin": tuner.margin, "threads": args.threads,
            "load_1min": sampler.between(started, ended)}
    result = {"meta": meta, "summary": summarise(cases), "cases": cases}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "tuner-accuracy-real.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / "tuner-accuracy-real.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
