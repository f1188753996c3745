"""How often the tuner picks the right profile on the REAL tiny llama-server, against a held-out truth.

The truth is not the tuner's own model, nor the emulator: for every case (a workload kind x an
output length) each example profile of profiles/tiny is measured on HELD-OUT prompts (every
held-out prompt, every profile, `--seeds` draws with different seeds, interleaved request by
request so load drift on the shared box hits every profile alike; the draft profile, two to three
times slower than plain on this box, only on the first `--draft-heldout` prompts), after the tuner's
runs of the case, or (`--truth-when around`) half before and half after them, or (`--truth-when
during`) a prompt at a time between the tuner's requests: see held_out_truth.py for why. The tuner then
decides the way `specd tune` does (specd.tune.tuner.tune: paired sequential sampling, the [tuner]
defaults n and margin, the box starting on autoregressive) on a SEPARATE sample of prompts from the
same generator. The rule the tuner used before issue 31 (medians whose 95% intervals must not
overlap: benchmarks/legacy_rule.py) is scored on the same samples: each profile's first n requests.

Two case sets: `today` (prose, copy-edit, code, code-edit at 32 and 128 output tokens, the bodies
exactly as the first version of this benchmark sent them: no temperature, so llama-server's
default sampling, temperature 0.8, with a seed per request) and `sampled` (prose and code at 32
and 128 tokens with temperature 0.8 set, `--tuner-runs` tuner runs per case).

Scored per decision, against the truth (margin m = the tuner's, 5%):
- right: the pick is not shown by the truth to be more than m slower than the truth's best (its
  paired bootstrap 95% interval of mean / best's mean, over held-out prompts, reaches 1 / (1 - m));
- regret: truth(pick) / truth(best) - 1;
- a switch where the truth says tied: the truth's interval of plain against the best lies within
  1 / (1 - m), i.e. the truth is confident nothing beats plain by the margin, and the tuner switched.
Baselines on the same cases: always autoregressive (plain), and always the one profile fastest on
average over the set's cases (chosen with the truth itself: an oracle's advantage).

Each profile runs as its own llama-server process (the argv specd renders for it), all four
resident, so the tuner's "switch" is a change of port rather than a systemd restart (the target
says its switches are cheap, so a round is one request per profile). Every profile runs with
`--threads` (default 1, not profiles/tiny's 2: on the shared 2-core box two threads per server
spin on each other). Requests are text completions (/v1/completions): the tiny model is a base
model. The fidelity gate (`specd verify`) is not run: it can only veto a switch, never cause one.
`--hog` runs benchmarks/cpu_hog.py (half of one core busy) for the whole run, on top of whatever
else the box is doing; the result file records the load average and CPU pressure seen.

    .venv/bin/python benchmarks/tuner_accuracy_real.py --set today [--label idle] [--hog]
    .venv/bin/python benchmarks/tuner_accuracy_real.py --set sampled [--label idle] [--hog]
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
from held_out_truth import TruthDuring, measure_truth
from legacy_rule import legacy_pick
from text_workloads import GENERATORS, TASK_CLASS, as_completion

from specd.profiles.config import TunerConfig
from specd.profiles.flags import binary_flags
from specd.profiles.load import load_profile
from specd.setup.sandbox import free_port
from specd.tune.bench import Settings
from specd.tune.noise import BoxLoad
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
    cheap_switches = True  # nothing restarts: the bench pairs requests one round at a time

    def __init__(self, ports: Mapping[str, int], active: str) -> None:
        self.ports, self._active = dict(ports), active
        self.http = httpx.Client(timeout=httpx.Timeout(600.0, connect=5.0))

    def active(self) -> str | None:
        return self._active

    def activate(self, profile: str) -> None:
        self._active = profile

    def complete(self, body: Mapping[str, Any], in_flight: int = 1) -> Reply:
        """The chat-shaped bench body as a text completion: the messages' contents are the prompt."""
        sent = as_completion(body)
        started = time.perf_counter()
        answer = self.http.post(f"http://127.0.0.1:{self.ports[self._active]}/v1/completions", json=sent)
        wall_ms = 1000.0 * (time.perf_counter() - started)
        answer.raise_for_status()
        return Reply(answer.json(), wall_ms)

    def vram_bytes(self) -> int | None:
        return None


@dataclass
class LoadSampler:
    """The 1-minute load average and the CPU pressure (10 s average) every few seconds."""

    samples: list[tuple[float, float, float]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _pressure: BoxLoad = field(default_factory=BoxLoad)

    def start(self) -> LoadSampler:
        threading.Thread(target=self._run, daemon=True).start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.time(), os.getloadavg()[0], self._pressure.now() or 0.0))
            self._stop.wait(5.0)

    def between(self, start: float, end: float) -> dict[str, float]:
        rows = [(load, psi) for at, load, psi in self.samples if start <= at <= end] or [(os.getloadavg()[0], 0.0)]
        loads, psis = [r[0] for r in rows], [r[1] for r in rows]
        return {"min": min(loads), "mean": round(sum(loads) / len(loads), 2), "max": max(loads),
                "pressure_mean": round(sum(psis) / len(psis), 3)}

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


SETS: dict[str, dict[str, Any]] = {"today": {"kinds": list(GENERATORS), "temperature": None, "tuner_runs": 1},
        "sampled": {"kinds": ["prose", "code"], "temperature": 0.8, "tuner_runs": 2}}


def distinct_prompts(kind: str, count: int, first_seed: int, exclude: set[str]) -> list[str]:
    found: list[str] = []
    seed = first_seed
    while len(found) < count:
        prompt = GENERATORS[kind](seed)
        if prompt not in exclude and prompt not in found:
            found.append(prompt)
        seed += 1
    return found


def workload(name: str, kind: str, prompts: Sequence[str], max_tokens: int, temperature: float | None) -> Workload:
    sampling = {} if temperature is None else {"temperature": temperature}
    return Workload(name, tuple(
        WorkloadRequest(body={"messages": [{"role": "user", "content": p}], "max_tokens": max_tokens, **sampling},
                        task_class=TASK_CLASS[kind])  # type: ignore[arg-type]
        for p in prompts))


def judge(walls: Mapping[str, list[list[float]]], margin: float, seed: int = 0) -> dict[str, Any]:
    """Means per profile, the best, each profile's paired bootstrap interval (over held-out prompts) of
    mean / best's mean, which picks count as right, and whether plain is confidently tied with the best."""
    per_prompt = {p: np.array([np.mean(draws) if draws else np.nan for draws in rows]) for p, rows in walls.items()}
    full = [p for p, v in per_prompt.items() if not np.isnan(v).any()]
    means = {p: float(per_prompt[p].mean()) for p in full}
    best = min(means, key=means.__getitem__)
    rng = np.random.default_rng(seed)
    intervals: dict[str, list[float]] = {}
    for profile, values in per_prompt.items():
        if profile == best:
            continue
        measured = ~np.isnan(values)
        mine, theirs = values[measured], per_prompt[best][measured]
        picks = rng.integers(0, len(mine), size=(BOOTSTRAP, len(mine)))
        ratios = mine[picks].sum(axis=1) / theirs[picks].sum(axis=1)
        lo, hi = np.quantile(ratios, [0.025, 0.975])
        intervals[profile] = [round(float(lo), 4), round(float(hi), 4)]
        if profile not in means:  # measured on fewer prompts: its mean at the best's scale
            means[profile] = float(mine.sum() / theirs.sum()) * means[best]
    within = 1.0 / (1.0 - margin)
    right = [best, *[p for p, (lo, _) in intervals.items() if lo <= within]]
    plain_tied = PLAIN == best or intervals[PLAIN][1] <= within
    plain_behind = PLAIN != best and intervals[PLAIN][0] > within
    return {"mean_ms": means, "best": best, "right": right, "ratio_ci95_vs_best": intervals,
            "plain_tied_with_best": plain_tied, "plain_more_than_margin_behind": plain_behind}


def score(pick: str, truth: Mapping[str, Any]) -> dict[str, Any]:
    means = truth["mean_ms"]
    return {"pick": pick, "right": pick in truth["right"], "regret": means[pick] / means[truth["best"]] - 1.0,
            "switch_on_tie": pick != PLAIN and truth["plain_tied_with_best"]}


def first_walls(result: Any, n: int) -> dict[str, list[float]]:
    """Each profile's first n wall clocks in plan order: what the old rule would have judged."""
    return {p: [r.wall_ms for r in sorted(rows, key=lambda r: r.position)[:n]]
            for p, rows in result.report.results.items() if rows}


def run_case(target: ServerSetTarget, sampler: LoadSampler, kind: str, max_tokens: int, args: argparse.Namespace,
             tuner: TunerConfig) -> dict[str, Any]:
    name = f"{kind}/{max_tokens}"
    temperature = SETS[args.set]["temperature"]
    held_prompts = distinct_prompts(kind, args.heldout, 1000, set())
    sample_prompts = distinct_prompts(kind, tuner.n, 0, set(held_prompts))
    held_out = workload(f"{name}-heldout", kind, held_prompts, max_tokens, temperature)
    started = time.time()
    # around: half the truth's draws before the tuner's runs and half after, so a load that moves during the
    # case lands on the truth as it lands on the tuner's bench (after: every draw once the tuner is done;
    # during: a truth step after every --truth-every requests of the tuner's, see held_out_truth.py)
    first = args.seeds // 2 if args.truth_when == "around" else 0
    truth_data = measure_truth(target, held_out, PROFILES, range(first), args.draft_heldout)
    during = (TruthDuring(target, held_out, PROFILES, args.draft_heldout, args.truth_every, truth_data)
              if args.truth_when == "during" else None)
    before = time.time()
    decisions = []
    for run in range(args.tuner_runs or int(SETS[args.set]["tuner_runs"])):
        target.activate(PLAIN)
        result = tune(during or target, list(PROFILES), workload(f"{name}-sample", kind, sample_prompts, max_tokens,
                                                       temperature),
                      Settings(n=tuner.n, seed=42 + 100 * run, max_n=args.max_n,
                               deadline=None if args.budget_min is None else time.monotonic() + 60 * args.budget_min),
                      margin=tuner.margin)
        old_pick, old_reason = legacy_pick(first_walls(result, tuner.n), PLAIN, tuner.margin)
        decision = result.decision
        decisions.append({"final_profile": result.final_profile or PLAIN, "outcome": decision.outcome,
                          "reason": decision.reason, "samples": dict(decision.samples), "stopped": decision.stopped,
                          "notes": [n for n in decision.notes if "pressure" in n or "noise" in n or "quiet" in n],
                          "bench_s": round(result.report.elapsed_s, 1), "legacy_pick": old_pick,
                          "legacy_reason": old_reason,
                          "paired": {e.profile: [e.ratio, e.ratio_lo, e.ratio_hi, e.pairs, e.verdict, e.measure]
                                     for e in decision.estimates if e.ratio is not None}})
        print(f"  {name} run {run + 1}: {decision.reason[:160]} ({decision.samples}, "
              f"{result.report.elapsed_s:.0f} s)", file=sys.stderr, flush=True)
    tuned = time.time()
    truth_data = (during.finish(args.seeds) if during is not None
                  else measure_truth(target, held_out, PROFILES, range(first, args.seeds), args.draft_heldout,
                                     into=truth_data))
    ended = time.time()
    truth = judge(truth_data["walls"], tuner.margin)
    print(f"{name}: truth best {truth['best']} (right {truth['right']}), tuner "
          f"{[d['final_profile'] for d in decisions]}, old rule {[d['legacy_pick'] for d in decisions]}, "
          f"{ended - started:.0f} s, load {sampler.between(started, ended)}", file=sys.stderr, flush=True)
    return {"case": name, "kind": kind, "max_tokens": max_tokens, "temperature": temperature, "truth": truth,
            "tuner": decisions, "truth_samples": truth_data,
            "seconds": {"truth_before": round(before - started), "tuner": round(tuned - before),
                        "truth_after": round(ended - tuned),
                        "truth_during_tuner": round(during.truth_s) if during is not None else 0},
            "truth_draws_per_prompt": min(len(draws) for draws in truth_data["walls"][PLAIN]),
            "load_1min": sampler.between(started, ended)}


def summarise(cases: list[dict[str, Any]]) -> dict[str, Any]:
    ratios = {p: float(np.exp(np.mean([np.log(c["truth"]["mean_ms"][p] / c["truth"]["mean_ms"][c["truth"]["best"]])
                                       for c in cases]))) for p in PROFILES}
    fastest = min(ratios, key=ratios.__getitem__)
    rows: dict[str, list[dict[str, Any]]] = {"tuner (paired, sequential)": [], "the rule before (same samples)": [],
                                             "always autoregressive": []}
    oracle = f"always {fastest}" if fastest != PLAIN else None  # the best single profile, when not plain itself
    if oracle is not None:
        rows[oracle] = []
    outcomes: dict[str, int] = {}
    for case in cases:
        truth = case["truth"]
        for d in case["tuner"]:
            rows["tuner (paired, sequential)"].append(score(d["final_profile"], truth))
            rows["the rule before (same samples)"].append(score(d["legacy_pick"], truth))
            rows["always autoregressive"].append(score(PLAIN, truth))
            if oracle is not None:
                rows[oracle].append(score(fastest, truth))
            outcomes[d["outcome"]] = outcomes.get(d["outcome"], 0) + 1
    table = {who: {"right": sum(s["right"] for s in scored), "of": len(scored),
                   "mean_regret": float(np.mean([s["regret"] for s in scored])),
                   "max_regret": float(max(s["regret"] for s in scored)),
                   "switches_on_tie": sum(s["switch_on_tie"] for s in scored),
                   "switches": sum(s["pick"] != PLAIN for s in scored)} for who, scored in rows.items()}
    return {"fastest_on_average": fastest, "geomean_ratio_to_best": ratios, "scores": table, "outcomes": outcomes,
            "truth_tied_cases": sum(c["truth"]["plain_tied_with_best"] for c in cases),
            "truth_plain_behind_cases": sum(c["truth"]["plain_more_than_margin_behind"] for c in cases)}


TRUTH_WHEN = {"after": "every draw after the tuner's runs of the case",
              "around": "half the draws before the tuner's runs of the case and half after",
              "during": ("one prompt on every profile after every few requests of the tuner's, through its runs "
                         "(at least the seeds' draws; more when the tuner ran long), so the truth ran at the "
                         "loads the tuner ran at")}


def markdown(result: dict[str, Any]) -> str:
    meta, summary = result["meta"], result["summary"]
    load = meta["load_1min"]
    lines = [
        (f"# Tuner accuracy on the real tiny llama-server ({meta['set']} cases, {meta['label']} box), "
        "scored against a held-out truth"),
        "",
        f"- command: `{meta['command']}`",
        (f"- machine: {meta['machine']}; {meta['load_note']}; 1-min load average over the run "
         f"{load['min']:.2f}-{load['max']:.2f} (mean {load['mean']:.2f}), CPU pressure (share of time a task waited "
         f"for a CPU, 10 s average) mean {load['pressure_mean']:.0%}; per case below"),
        f"- date: {meta['date']}, specd {meta['commit']}, {meta['minutes']:.0f} minutes",
        ("- server: llama-server (llama.cpp from the llama-cpp-python 0.3.36 sdist, CPU), Gemma 3 270M Q4_K_M "
         "(a base model: text completions on /v1/completions), the profiles of profiles/tiny, one resident "
         f"server per profile, every profile at --threads {meta['threads']}"),
        f"- requests: {meta['sampling']}",
        (f"- truth: every profile on {meta['heldout']} HELD-OUT prompts per case x {meta['seeds']} seeds (draft: "
         f"the first {meta['draft_heldout']} prompts), interleaved request by request, "
         f"{TRUTH_WHEN[meta.get('truth_when', 'after')]}; truth = mean wall clock. A "
         "pick is RIGHT when the truth's paired bootstrap 95% interval of (pick's mean / best's mean) over the "
         f"held-out prompts reaches {1 / (1 - meta['tuner_margin']):.4f} (not shown to be more than the "
         "margin slower than the best). The truth says plain is TIED with the best when plain is the best or "
         "its interval lies below that; PLAIN BEHIND when it lies above"),
        (f"- tuner: specd.tune.tuner.tune with the [tuner] defaults (n = {meta['tuner_n']}, margin = "
         f"{meta['tuner_margin']}; cap {meta['cap']} requests per profile"
         + (f", a time budget of {meta['budget_min']:g} minutes per tuner run" if meta.get("budget_min") else "")
         + "), starting on autoregressive, on "
         f"{meta['tuner_n']} other prompts from the same generator (disjoint from the held-out ones), "
         f"{meta['tuner_runs']} run(s) per case. The rule before issue 31 (benchmarks/legacy_rule.py) is scored on "
         "the same bench samples: each profile's first n requests (fewer where the new rule dropped it early)"),
        f"- raw: [{meta['stem']}.json]({meta['stem']}.json)",
        "",
        (f"Cases where the truth says plain is tied with the best: {summary['truth_tied_cases']} of "
         f"{len(result['cases'])}; where plain is more than the margin behind: "
         f"{summary['truth_plain_behind_cases']}."),
        "",
        "| who picks | right picks | mean regret | worst regret | switches | switches where the truth says tied |",
        "|---|---|---|---|---|---|",
    ]
    for who, row in summary["scores"].items():
        lines.append(f"| {who} | {row['right']}/{row['of']} ({row['right'] / row['of']:.0%}) | "
                     f"{row['mean_regret']:+.1%} | {row['max_regret']:+.1%} | {row['switches']} | "
                     f"{row['switches_on_tie']} |")
    outcomes = summary["outcomes"]
    lines += [
        "",
        (f"Tuner outcomes: switched {outcomes.get('switch', 0)}, kept (tied) {outcomes.get('tied', 0)}, kept (not "
         f"enough evidence within the budget) {outcomes.get('unsure', 0)}, kept (no candidate faster) "
         f"{outcomes.get('kept', 0)}."),
        "",
        (f"`always {summary['fastest_on_average']}` is the profile with the lowest geometric-mean ratio to the "
         "best over the set's cases, chosen with the truth itself (an oracle's advantage for that baseline; one "
         "row with always autoregressive when that is the one)."),
        "",
        ("| case | truth: mean wall ms per profile | best | right picks | tuner: pick, outcome (requests per "
         "profile) | rule before | load 1-min |"),
        "|---|---|---|---|---|---|---|",
    ]
    for case in result["cases"]:
        truth = case["truth"]
        means = ", ".join(f"{p} {truth['mean_ms'][p]:.0f}" for p in PROFILES)
        picks = "; ".join(f"{d['final_profile']}, {d['outcome']} "
                          f"({', '.join(str(d['samples'].get(p, 0)) for p in PROFILES)})" for d in case["tuner"])
        old = "; ".join(d["legacy_pick"] for d in case["tuner"])
        load = case["load_1min"]
        lines.append(f"| {case['case']} | {means} | {truth['best']} | {', '.join(truth['right'])} | {picks} | {old} | "
                     f"{load['min']:.1f}-{load['max']:.1f} |")
    lines += ["", "Tuner reasons (and what it said of the box's noise):", ""]
    for case in result["cases"]:
        for d in case["tuner"]:
            lines.append(f"- {case['case']}: {d['reason']}; stopped: {d['stopped']}")
            lines += [f"  - {note}" for note in d["notes"]]
    lines += ["", "The rule before, on the same samples:", ""]
    lines += [f"- {case['case']}: {d['legacy_reason']}" for case in result["cases"] for d in case["tuner"]]
    lines += ["", "Output tokens (median over held-out prompts and seeds, autoregressive): " + ", ".join(
        f"{c['case']} {int(np.median([t for ts in c['truth_samples']['output_tokens'][PLAIN] for t in ts]))}"
        for c in result["cases"]), ""]
    return "\n".join(lines)


def merge(paths: Sequence[Path], out: Path, label: str) -> None:
    """One result file from runs of the same set that ran side by side (each on some of the cases)."""
    parts = [json.loads(path.read_text()) for path in paths]
    sets = {part["meta"]["set"] for part in parts}
    if len(sets) != 1:
        raise SystemExit(f"runs of different case sets: {sorted(sets)}")
    cases = [case for part in parts for case in part["cases"]]
    meta = dict(parts[0]["meta"])
    loads = [part["meta"]["load_1min"] for part in parts]
    meta.update(label=label, stem=f"tuner-accuracy-real-{meta['set']}-{label}",
                command=" ; ".join(part["meta"]["command"] for part in parts) + " (side by side; merged with "
                        f"`--merge {' '.join(p.name for p in paths)}`)",
                minutes=max(part["meta"]["minutes"] for part in parts),
                load_1min={"min": min(x["min"] for x in loads), "max": max(x["max"] for x in loads),
                           "mean": round(sum(x["mean"] for x in loads) / len(loads), 2),
                           "pressure_mean": round(sum(x["pressure_mean"] for x in loads) / len(loads), 3)})
    result = {"meta": meta, "summary": summarise(cases), "cases": cases}
    (out / f"{meta['stem']}.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / f"{meta['stem']}.md").write_text(markdown(result))
    print(markdown(result))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=sorted(SETS), default="today")
    parser.add_argument("--label", default="loaded", help="names the result files: idle or loaded")
    parser.add_argument("--heldout", type=int, default=6, help="held-out prompts per case")
    parser.add_argument("--seeds", type=int, default=2, help="draws (seeds) of each held-out prompt per profile")
    parser.add_argument("--truth-when", choices=("after", "around", "during"), default="after",
                        help="the truth's draws all after the tuner's runs, half before and half after, or a "
                             "step at a time between the tuner's requests (at least --seeds draws)")
    parser.add_argument("--truth-every", type=int, default=9,
                        help="with --truth-when during: a truth step after every this many tuner requests (9: a third "
                             "or more of the time budget goes to the truth, which runs every profile)")
    parser.add_argument("--draft-heldout", type=int, default=3, help="held-out prompts the slow draft profile runs")
    parser.add_argument("--tuner-runs", type=int, default=0, help="tuner runs per case (default: the set's)")
    parser.add_argument("--lengths", type=int, nargs="*", default=[32, 128])
    parser.add_argument("--kinds", nargs="*", default=None, help="default: the set's")
    parser.add_argument("--threads", type=int, default=1,
                        help="llama-server threads for every profile (profiles/tiny says 2; see the module doc)")
    parser.add_argument("--hog", action="store_true", help="run benchmarks/cpu_hog.py for the whole run")
    parser.add_argument("--max-n", type=int, default=None, help="the tuner's sample cap per profile (default 32 x n)")
    parser.add_argument("--budget-min", type=float, default=None,
                        help="each tuner run's time budget in minutes (the night's budget_minutes; default none)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--merge", type=Path, nargs="*", help="merge these result JSON files (runs side by side)")
    args = parser.parse_args()
    if args.merge:
        merge(args.merge, args.out, args.label)
        return
    tuner = TunerConfig()
    kinds = args.kinds or SETS[args.set]["kinds"]
    root = Path(tempfile.mkdtemp(prefix="specd-tuner-truth-"))
    sampler = LoadSampler().start()
    started = time.time()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the servers on the way out
    hog = subprocess.Popen([sys.executable, str(REPO / "benchmarks" / "cpu_hog.py")]) if args.hog else None
    ports, processes = start_servers(root, args.threads)
    try:
        target = ServerSetTarget(ports, PLAIN)
        for profile in PROFILES:  # first requests pay page faults: keep them out of every measurement
            target.activate(profile)
            target.complete({"messages": [{"content": "Warm-up."}], "max_tokens": 8, "temperature": 0})
        cases: list[dict[str, Any]] = []
        for kind in kinds:
            for length in args.lengths:
                cases.append(run_case(target, sampler, kind, length, args, tuner))
                write_results(args, tuner, cases, sampler, started, partial=True)  # a cut-short run keeps its cases
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=30)
        if hog is not None:
            hog.terminate()
            hog.wait(timeout=30)
        sampler.stop()
        shutil.rmtree(root, ignore_errors=True)
    write_results(args, tuner, cases, sampler, started, partial=False)


def head_commit() -> str:
    return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          check=False).stdout.strip()


COMMIT_AT_START = head_commit()  # the code this run imported, whatever is committed while it runs


def write_results(args: argparse.Namespace, tuner: TunerConfig, cases: list[dict[str, Any]], sampler: LoadSampler,
                  started: float, *, partial: bool) -> None:
    ended = time.time()
    commit = COMMIT_AT_START
    stem = f"tuner-accuracy-real-{args.set}-{args.label}"
    temperature = SETS[args.set]["temperature"]
    meta = {"command": " ".join([".venv/bin/python", "benchmarks/tuner_accuracy_real.py", *sys.argv[1:]]),
            "machine": f"{platform.platform()}, {os.cpu_count()} CPUs", "label": args.label, "set": args.set,
            "load_note": ("benchmarks/cpu_hog.py ran throughout (half of one core), on top of the other jobs "
                          "sharing the box" if args.hog else "no load added by the run"),
            "sampling": ("no temperature in the bodies: llama-server's default sampling (temperature 0.8), a seed "
                         "per request" if temperature is None else f"temperature {temperature} in every body") +
                        "; the tuner draws a fresh seed each time it replays a prompt again, the truth one per draw",
            "date": datetime.fromtimestamp(started, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), "stem": stem,
            "commit": commit, "minutes": (ended - started) / 60, "heldout": args.heldout, "seeds": args.seeds,
            "draft_heldout": args.draft_heldout, "truth_when": args.truth_when,
            "tuner_runs": args.tuner_runs or SETS[args.set]["tuner_runs"],
            "tuner_n": tuner.n, "tuner_margin": tuner.margin, "threads": args.threads,
            "cap": Settings(n=tuner.n, max_n=args.max_n).cap, "budget_min": args.budget_min, "partial": partial,
            "load_1min": sampler.between(started, ended)}
    result = {"meta": meta, "summary": summarise(cases), "cases": cases}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stem}.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / f"{stem}.md").write_text(markdown(result))
    if not partial:
        print(markdown(result))


if __name__ == "__main__":
    main()
