"""Routing on the real tiny model: a copy-style + prose mix, routed against each single profile.

Two real llama-server processes (the pinned CPU build, Gemma 3 270M Q4_K_M), one thread each so both
fit this 2-core box: the tiny `ngram-simple` profile and the tiny `autoregressive` one, their command
lines rendered by specd from profiles/tiny (threads = 1, parallel = 1). Clients talk to specd's real
proxy set up three ways, one at a time:

    single-ngram   every request to the n-gram server (specd before routing, had the tuner picked it)
    single-plain   every request to the plain server
    routed         the n-gram server serving (or, with --serving learned, the profile the paired rule
                   picks on the training bench), the other its companion; the table LEARNED by
                   specd.tune.routes from a bench of both profiles on the training half

The mix is the built-in `repeat-input` (edit/rewrite asks whose answer copies the prompt: n-gram's
case) and `prose` sets, split before any run: even positions train the table, odd ones are measured
(held out); max_tokens is capped (--max-tokens) so a repetition fits in minutes on a shared box.
Each repetition sends every held-out request, in file order, through each configuration back to back
(each of the six orders in turn, request by request), so a burst of load from the box's other tenants lands on all
three alike; the figure is the mix's wall clock, the sum over its requests. Intervals are 95% t intervals over
repetitions of the paired ratio (routed / single in the same repetition). The box is shared and
loaded: the load average is written with the results.

With `--mix text` the mix is instead text completions (/v1/completions), the form this base model is
made for, drawn from benchmarks/text_workloads.py: `copy-edit` (a few-shot "fix the spelling" prompt
whose answer repeats the paragraph: greedy, as an editing client sends it) and `prose` (a story's
opening, sampled at --temperature with a fresh seed per repetition, the same seed for the three
configurations of one request). Training and held-out prompts come from disjoint seed ranges. Each
request's task class is what the proxy's classifier says of it, so the table is learned on the
classes the router will see. On this model chat-shaped prose falls into repetition that n-gram
drafts copy (n-gram wins there too), while sampled text prose gives n-gram nothing to copy: the
mix the issue asks for, where n-gram wins on copy-style requests and loses on prose.

    .venv/bin/python benchmarks/routing_real.py [--mix chat|text] [--reps 6] [--max-tokens 40]
        [--train-rounds 2] [--temperature 0.8] [--margin 0.05] [--ngram-size-n N]
        [--serving ngram-simple|learned] [--held-seed 5000] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import tomlkit

from specd.profiles.flags import binary_flags
from specd.profiles.load import load_profile
from specd.proxy.proxy import Backend
from specd.proxy.routes import Companion, RouteSet
from specd.routing.table import RoutingTable, describe
from specd.setup.sandbox import free_port
from specd.traffic.taskclass import classify
from specd.tune.bench import Settings, bench_profiles
from specd.tune.results import Result
from specd.tune.routes import learn, paired
from specd.tune.workloads import Workload, WorkloadRequest, load_workload
from specd.unit.render import build_argv

sys.path.insert(0, str(Path(__file__).resolve().parent))
import text_workloads
from routing_emulator import (
    FleetTarget,
    ProxyThread,
    machine,
    ratio_interval,
    run_mix,
    stop_all,
    t_interval,
    wait_up,
)
from text_workloads import as_completion

REPO = Path(__file__).resolve().parent.parent
PROFILES = ("ngram-simple", "autoregressive")
CONFIGS = ("single-ngram", "single-plain", "routed")
# Every order of the three, in turn: routed and single-ngram share the n-gram server, so a rotation of
# one order had single-ngram right after routed on that server in two of three requests (a warm server
# answers a little sooner); over all six orders each follows the other equally often.
ORDERS = tuple(itertools.permutations(CONFIGS))
SINGLE = {"ngram-simple": "single-ngram", "autoregressive": "single-plain"}


def tiny_profiles(target: Path, ngram_size_n: int | None = None) -> Path:
    """profiles/tiny copied to `target` at one thread per server, the n-gram profile's lookup length set when
    given (llama.cpp's default otherwise)."""
    shutil.copytree(REPO / "profiles" / "tiny", target)
    base = tomlkit.parse((target / "base.toml").read_text())
    base["threads"] = 1
    (target / "base.toml").write_text(tomlkit.dumps(base))
    if ngram_size_n is not None:
        ngram = tomlkit.parse((target / "ngram-simple.toml").read_text())
        ngram["speculative"]["ngram_simple_size_n"] = ngram_size_n  # type: ignore[index]
        (target / "ngram-simple.toml").write_text(tomlkit.dumps(ngram))
    return target


def start_server(profiles_dir: Path, name: str, port: int, log: Path) -> subprocess.Popen[bytes]:
    profile = load_profile(profiles_dir, name)
    argv = build_argv(profile, binary_flags(profile.binary, profile.launcher))
    argv[argv.index("--port") + 1] = str(port)
    return subprocess.Popen(argv, stdout=log.open("wb"), stderr=subprocess.STDOUT)


class TextFleetTarget(FleetTarget):
    """The bench's target for a text mix: the chat-shaped bench body sent as a text completion."""

    endpoint = "/v1/completions"

    def sent(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return as_completion(body)


def run_text(url: str, request: WorkloadRequest, seed: int) -> tuple[float, int]:
    """One text completion through a proxy: (seconds, failed requests); sampled bodies get `seed`."""
    body = as_completion(request.body) | {"cache_prompt": False, "stream": False}
    if body.get("temperature"):
        body["seed"] = seed
    started = time.perf_counter()
    try:
        ok = httpx.post(f"{url}/v1/completions", json=body, timeout=600).status_code == 200
    except httpx.HTTPError:
        ok = False
    return time.perf_counter() - started, 0 if ok else 1


TEXT_SEEDS = {"train": 1000, "held": 5000}  # disjoint seed ranges: disjoint prompts
TEXT_PER_KIND = 6  # prompts of each kind in each half


def split_text(max_tokens: int, temperature: float, held_seed: int = TEXT_SEEDS["held"],
               ) -> tuple[list[WorkloadRequest], list[WorkloadRequest]]:
    """Training and held-out text requests, copy-edit and prose alternating (each half fixed before any run);
    `held_seed` moves the held-out half to prompts no earlier run has seen."""
    halves: dict[str, list[WorkloadRequest]] = {"train": [], "held": []}
    for half, first_seed in {"train": TEXT_SEEDS["train"], "held": held_seed}.items():
        kinds = {kind: text_workloads.prompts(kind, first_seed, TEXT_PER_KIND) for kind in ("copy-edit", "prose")}
        for edit, story in zip(kinds["copy-edit"], kinds["prose"], strict=True):
            for prompt, sampling in ((edit, 0.0), (story, temperature)):
                messages = [{"role": "user", "content": prompt}]
                body = {"messages": messages, "max_tokens": max_tokens, "temperature": sampling}
                halves[half].append(WorkloadRequest(body, classify(messages)))
    return halves["train"], halves["held"]


def split(max_tokens: int) -> tuple[list[WorkloadRequest], list[WorkloadRequest]]:
    train: list[WorkloadRequest] = []
    held: list[WorkloadRequest] = []
    for name in ("repeat-input", "prose"):
        for index, request in enumerate(load_workload(name).requests):
            body = {**request.body, "max_tokens": min(int(request.body["max_tokens"]), max_tokens)}
            short = WorkloadRequest(body, request.task_class)
            (train if index % 2 == 0 else held).append(short)
    return train, held


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=40)
    parser.add_argument("--train-rounds", type=int, default=2,
                        help="times the training half is replayed on each profile to learn the table")
    parser.add_argument("--mix", choices=("chat", "text"), default="chat",
                        help="chat: built-in repeat-input + prose sets; text: copy-edit + sampled prose completions")
    parser.add_argument("--temperature", type=float, default=0.8, help="the text mix's prose temperature")
    parser.add_argument("--margin", type=float, default=0.05,
                        help="the gain a class's route needs ([tuner] margin in specd.toml)")
    parser.add_argument("--ngram-size-n", type=int, default=None,
                        help="the n-gram profile's lookup length ([speculative] ngram_simple_size_n; default: "
                             "llama.cpp's 12): a short one drafts on common word pairs, wrongly in prose")
    parser.add_argument("--held-seed", type=int, default=TEXT_SEEDS["held"],
                        help="first seed of the text mix's held-out prompts (a fresh range: prompts no run has seen)")
    parser.add_argument("--serving", choices=("ngram-simple", "learned"), default="ngram-simple",
                        help="the routed proxy's serving profile: ngram-simple, or the one the tuner's paired rule "
                             "picks on the training bench (plain, the incumbent, unless n-gram is clearly faster)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks/results/routing-real.md")
    args = parser.parse_args()
    os.environ.setdefault("SPECD_CACHE", str(Path.home() / ".cache" / "specd"))
    started_at, machine_before = datetime.now(UTC), machine()
    scratch = Path(tempfile.mkdtemp(prefix="routing-real-"))
    profiles_dir = tiny_profiles(scratch / "profiles", args.ngram_size_n)
    ports = {name: free_port() for name in PROFILES}
    urls = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
    servers = [start_server(profiles_dir, name, port, scratch / f"{name}.log") for name, port in ports.items()]
    proxies: dict[str, ProxyThread] = {}
    loads: list[float] = []
    try:
        for url in urls.values():
            wait_up(url, 300)
        text = args.mix == "text"
        train, held = split_text(args.max_tokens, args.temperature, args.held_seed) if text else split(args.max_tokens)
        target = TextFleetTarget(urls) if text else FleetTarget(urls)
        # Both servers stay resident: a round of one request per profile costs no switch, so the bench pairs
        # each request with its twin next to it in time and its interval counts every round (without this
        # the bench made 4 rounds of the whole training set, and its intervals had 4 clusters to go by).
        target.cheap_switches = True  # type: ignore[attr-defined]
        report = bench_profiles(target, list(PROFILES), Workload("train", tuple(train), origin="builtin"),
                                Settings(n=args.train_rounds * len(train), concurrency=1, early_stop=False,
                                         cache_reuse=False))
        serving = args.serving if args.serving != "learned" else serving_profile(report.results, args.margin)
        table = learn(report.results, RoutingTable(), active=serving, margin=args.margin, now=time.time(),
                      source=f"bench of {len(train)} training requests x {args.train_rounds}, one at a time").table
        backends = {name: Backend(urls[name], name) for name in PROFILES}
        companion = next(name for name in PROFILES if name != serving)
        proxies = {"single-ngram": ProxyThread(backends["ngram-simple"], RouteSet()),
                   "single-plain": ProxyThread(backends["autoregressive"], RouteSet()),
                   "routed": ProxyThread(backends[serving],
                                         RouteSet(True, (Companion(urls[companion], companion),), table))}
        walls: dict[str, list[float]] = {c: [] for c in CONFIGS}
        per_request: list[RequestRow] = []
        router = proxies["routed"].proxy.router
        failures = 0
        for rep in range(args.reps):
            spent = dict.fromkeys(CONFIGS, 0.0)
            for index, request in enumerate(held):  # each request through every configuration back to back
                order = ORDERS[(rep * len(held) + index) % len(ORDERS)]
                kind = ("copy-edit" if index % 2 == 0 else "prose") if text else None
                row = RequestRow(rep, index, f"{kind} ({request.task_class})" if kind else str(request.task_class))
                for config in order:
                    before = dict(router.counts) if router is not None else {}
                    url = proxies[config].url
                    seconds, failed = (run_text(url, request, 7000 + 100 * rep + index) if text
                                       else run_mix(url, [request], 1))
                    spent[config] += seconds
                    failures += failed
                    row.seconds[config] = seconds
                    if config == "routed" and router is not None:
                        row.routed_to = next((k for k, v in router.counts.items() if v != before.get(k, 0)), None)
                per_request.append(row)
            for config in CONFIGS:
                walls[config].append(spent[config])
            loads.append(os.getloadavg()[0])
            print(f"rep {rep + 1}/{args.reps}: " + ", ".join(f"{c} {walls[c][-1]:.1f} s" for c in CONFIGS),
                  file=sys.stderr, flush=True)
        counts = router.status()["routed"] if router is not None else {}
    finally:
        stop_all(proxies.values(), servers)
        shutil.rmtree(scratch, ignore_errors=True)
    write(args, walls, table, held, failures, counts, loads, machine_before, started_at, per_request, serving)


def serving_profile(results: Mapping[str, Sequence[Result]], margin: float) -> str:
    """The profile a deployment would serve from after this bench: plain (the incumbent) unless n-gram is faster
    on the whole training mix by the routes' paired rule (its interval below 1 - margin)."""
    found = paired(results["ngram-simple"], results["autoregressive"], margin)
    return "ngram-simple" if found is not None and found.verdict == "faster" else "autoregressive"


@dataclass
class RequestRow:
    """One held-out request in one repetition: its seconds through each configuration, and routed's choice."""

    rep: int
    index: int
    label: str
    seconds: dict[str, float] = field(default_factory=dict)
    routed_to: str | None = None  # "profile reason", as the router counts it

    @property
    def twin(self) -> float:
        """The single configuration's seconds on the server routed chose: routed at no routing cost."""
        assert self.routed_to is not None
        return self.seconds[SINGLE[self.routed_to.split(" ")[0]]]


def per_request_lines(rows: Sequence[RequestRow]) -> list[str]:
    """Where the routed mix's time went, request by request: each class's own ratio on the held-out half, and
    routed's time against the single configuration that sends to the server routed chose (its own cost)."""
    lines = ["## Request by request (held-out half)", "",
             "| label | requests x reps | n-gram / plain, single configurations (mean, 95% interval) | routed to |",
             "|---|---|---|---|"]
    for label in sorted({r.label for r in rows}):
        mine = [r for r in rows if r.label == label]
        ratio = ratio_interval([r.seconds["single-ngram"] for r in mine], [r.seconds["single-plain"] for r in mine])
        sent = Counter(str(r.routed_to) for r in mine)
        lines.append(f"| {label} | {len(mine)} | {ratio.mean:.3f} ({ratio.lo:.3f}-{ratio.hi:.3f}) | "
                     f"{json.dumps(dict(sent))} |")
    chosen = [r for r in rows if r.routed_to is not None]
    cost = ratio_interval([r.seconds["routed"] for r in chosen], [r.twin for r in chosen])
    total = {c: sum(r.seconds[c] for r in chosen) for c in CONFIGS}
    twins = sum(r.twin for r in chosen)
    lines += ["", (f"- routed / the single configuration of the server it chose, per request: **{cost.mean:.3f}** "
                   f"({cost.lo:.3f}-{cost.hi:.3f}; {len(chosen)} requests): the routed path's own cost for the same "
                   "request on the same server"),
              (f"- routed's choices at the single configurations' times (routing at no cost): "
               f"{twins / total['single-plain']:.3f} of single-plain's and {twins / total['single-ngram']:.3f} of "
               f"single-ngram's; routed as measured: {total['routed'] / total['single-plain']:.3f} and "
               f"{total['routed'] / total['single-ngram']:.3f}"), ""]
    return lines


def notes(counts: dict[str, int]) -> list[str]:
    """What the figures mean: the truth, and whether routing did anything the best single profile did not."""
    served = sorted({key.split(" ")[0] for key in counts})
    lines = ["## What this shows, and what it does not", "",
             ("- Truth: wall clock of the real server on held-out requests (the table never saw them); the trivial "
             "baselines are the single profiles on the same requests, in the same repetitions.")]
    if len(served) == 1:
        lines.append(f"- The learned table routes every class to {served[0]}: on this model and box no class "
                     "had another profile faster by the 5% margin with its interval clear, so routing sent each "
                     f"request where {SINGLE[served[0]]} does, and routed / {SINGLE[served[0]]} measures the box's "
                     "noise and routing's own cost per request (reading the body and choosing), not a gain.")
    else:
        lines.append(f"- Routing served the classes from {', '.join(served)}.")
    return [*lines, ""]


def write(args: argparse.Namespace, walls: dict[str, list[float]], table: RoutingTable,
          held: Sequence[WorkloadRequest], failures: int, counts: dict[str, int], loads: Sequence[float],
          machine_before: str, started_at: datetime, per_request: Sequence[RequestRow], serving: str) -> None:
    means = {c: t_interval(v) for c, v in walls.items()}
    best = min(("single-ngram", "single-plain"), key=lambda c: means[c].mean)
    vs_best = ratio_interval(walls["routed"], walls[best])
    other = "single-plain" if best == "single-ngram" else "single-ngram"
    vs_other = ratio_interval(walls["routed"], walls[other])
    mix = dict(Counter(str(r.task_class) for r in held))
    sized = "" if args.ngram_size_n is None else f" --ngram-size-n {args.ngram_size_n}"
    sized += "" if args.serving == "ngram-simple" else f" --serving {args.serving}"
    sized += "" if args.held_seed == TEXT_SEEDS["held"] else f" --held-seed {args.held_seed}"
    if args.mix == "text":
        command = (f"--mix text --temperature {args.temperature} --margin {args.margin} --reps {args.reps} "
                   f"--max-tokens {args.max_tokens} --train-rounds {args.train_rounds}{sized}")
        described = (f"{len(held)} text completions, copy-edit (greedy) and prose (temperature {args.temperature}, "
                     f"a fresh seed each repetition) alternating, max_tokens {args.max_tokens}; the task classes the "
                     f"proxy's classifier gives them: {mix}; prompts from seeds {args.held_seed}.. of "
                     f"benchmarks/text_workloads.py, the table learned on seeds {TEXT_SEEDS['train']}..; margin "
                     f"{args.margin}")
    else:
        command = f"--reps {args.reps} --max-tokens {args.max_tokens} --train-rounds {args.train_rounds}{sized}"
        described = (f"{len(held)} requests (labels of the built-in sets: {mix}; max_tokens capped at "
                     f"{args.max_tokens}), the odd positions of `repeat-input` and `prose`; the table was learned "
                     "on the even positions")
    lines = ["# Routing on the real tiny model: routed vs each single profile", "",
             (f"**Command:** `.venv/bin/python benchmarks/routing_real.py {command}`. "
              f"Date: {started_at:%Y-%m-%d %H:%M} UTC."), "",
             (f"Machine before: {machine_before}. After: {machine()}. The 1-minute load average after each "
             f"repetition was {', '.join(f'{x:.1f}' for x in loads)} on 2 cores (the two servers and the client "
             "make about 2; more is other work on the box, and every figure carries that noise); each request ran "
             "through the three configurations back to "
             "back (each of the six orders in turn) and the mixes are compared by paired ratios."), "",
             ("Servers: the pinned llama-server CPU build, Gemma 3 270M Q4_K_M, profiles/tiny's `ngram-simple` and "
             "`autoregressive` with threads = 1 (one core each), parallel = 1"
             + ("." if args.ngram_size_n is None else
                f"; `ngram-simple` with `ngram_simple_size_n = {args.ngram_size_n}` (llama.cpp's default is 12).")), "",
             f"Held-out mix: {described}. Failed requests over every run: {failures}.", "",
             (f"Routed: served from `{serving}`" + (" (the training bench's pick by the paired rule)"
              if args.serving == "learned" else " (fixed by --serving)") + ", the other profile its companion."), "",
             "## The learned table (training half)", "", "```", *describe(table), "```", "",
             "## Mix wall clock, one request at a time", "",
             "| configuration | s (mean, 95% interval) |", "|---|---|",
             *(f"| {c} | {means[c].mean:.1f} ({means[c].lo:.1f}-{means[c].hi:.1f}) |" for c in CONFIGS), "",
             (f"- routed / {best} (the best single profile here): **{vs_best.mean:.3f}** (95% interval "
             f"{vs_best.lo:.3f}-{vs_best.hi:.3f})"),
             f"- routed / {other}: {vs_other.mean:.3f} ({vs_other.lo:.3f}-{vs_other.hi:.3f})", "",
             f"Requests the routed proxy sent, by profile and reason: {json.dumps(counts)}.", "",
             *per_request_lines(per_request), *notes(counts)]
    args.out.write_text("\n".join(lines), encoding="utf-8")
    args.out.with_suffix(".json").write_text(json.dumps(
        {"walls_s": walls, "best_single": best, "routed_vs_best": [vs_best.mean, vs_best.lo, vs_best.hi],
         "routed_vs_other": [vs_other.mean, vs_other.lo, vs_other.hi], "table": table.as_json(),
         "routed_counts": counts, "load_average": list(loads), "failures": failures, "serving": serving,
         "per_request": [asdict(r) for r in per_request]}, indent=1), encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
