"""Choose the n-gram profile's lookup length for benchmarks/routing_real.py on the TRAINING half alone.

Issue 35 asks for a real-model mix where n-gram wins on copy-style requests and loses on prose. On the
tiny model llama.cpp's default lookup length (12) drafts almost never in sampled prose (tied with plain:
routing-real-text*.md), and length 2 drafted wrongly on both kinds (routing-real-text-ngram2.md). This
script measures each candidate length on the training prompts of routing_real.py's text mix (seeds 1000..,
never the held-out ones), every request on plain and on n-gram back to back (the order alternating), and
picks the length whose worse side is best: the largest min(plain / n-gram on copy-edit, n-gram / plain
on prose), geometric means over the distinct training prompts. The candidates and the rule are fixed
here before any run; the held-out run then uses the chosen length on fresh seeds.

    .venv/bin/python benchmarks/routing_real_ngram.py [--lengths 2,3,4,6,8,12] [--rounds 2]
        [--max-tokens 64] [--temperature 0.8] [--out benchmarks/results/routing-real-ngram-choice.md]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from routing_emulator import machine, stop_all, t_interval, wait_up
from routing_real import REPO, TEXT_SEEDS, run_text, split_text, start_server, tiny_profiles

from specd.setup.sandbox import free_port


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", default="2,3,4,6,8,12")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks/results/routing-real-ngram-choice.md")
    args = parser.parse_args()
    os.environ.setdefault("SPECD_CACHE", str(Path.home() / ".cache" / "specd"))
    lengths = [int(x) for x in args.lengths.split(",")]
    started_at, machine_before = datetime.now(UTC), machine()
    train, _ = split_text(args.max_tokens, args.temperature)
    scratch = Path(tempfile.mkdtemp(prefix="routing-ngram-"))
    # log ratio n-gram / plain per (length, kind, prompt index), one per round
    logs: dict[int, dict[str, dict[int, list[float]]]] = {n: defaultdict(lambda: defaultdict(list)) for n in lengths}
    failures = 0
    plain_port = free_port()
    plain_url = f"http://127.0.0.1:{plain_port}"
    plain = start_server(tiny_profiles(scratch / "profiles-plain"), "autoregressive", plain_port, scratch / "plain.log")
    try:
        wait_up(plain_url, 300)
        for length in lengths:
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            folder = tiny_profiles(scratch / f"profiles-ngram-{length}", length)
            server = start_server(folder, "ngram-simple", port, scratch / f"ngram-{length}.log")
            try:
                wait_up(url, 300)
                for round_ in range(args.rounds):
                    for index, request in enumerate(train):
                        kind = "copy-edit" if index % 2 == 0 else "prose"
                        seed = 3000 + 100 * round_ + index
                        order = (plain_url, url) if (round_ + index) % 2 == 0 else (url, plain_url)
                        seconds = {}
                        for target in order:
                            seconds[target], failed = run_text(target, request, seed)
                            failures += failed
                        logs[length][kind][index].append(math.log(seconds[url] / seconds[plain_url]))
                print(f"length {length}: " + ", ".join(
                    f"{kind} {math.exp(sum(sum(v) for v in by.values()) / sum(len(v) for v in by.values())):.3f}"
                    for kind, by in logs[length].items()), file=sys.stderr, flush=True)
            finally:
                stop_all((), [server])
    finally:
        stop_all((), [plain])
        shutil.rmtree(scratch, ignore_errors=True)
    write(args, lengths, logs, failures, machine_before, started_at, len(train))


def write(args: argparse.Namespace, lengths: list[int], logs: dict[int, dict[str, dict[int, list[float]]]],
          failures: int, machine_before: str, started_at: datetime, requests: int) -> None:
    rows = []
    for length in lengths:
        # per kind: t interval over distinct prompts of each prompt's mean log ratio (n-gram / plain)
        kinds = {kind: t_interval([sum(v) / len(v) for v in by.values()]) for kind, by in logs[length].items()}
        copy_gain = math.exp(-kinds["copy-edit"].mean)  # plain / n-gram on copy-edit: > 1 is a win
        prose_loss = math.exp(kinds["prose"].mean)  # n-gram / plain on prose: > 1 is a loss
        rows.append({"length": length, "score": min(copy_gain, prose_loss),
                     **{kind: [math.exp(i.mean), math.exp(i.lo), math.exp(i.hi)] for kind, i in kinds.items()}})
    chosen = max(rows, key=lambda row: row["score"])
    lines = ["# The n-gram lookup length for the real-model routing run, chosen on the training half", "",
             (f"**Command:** `.venv/bin/python benchmarks/routing_real_ngram.py --lengths {args.lengths} --rounds "
              f"{args.rounds} --max-tokens {args.max_tokens} --temperature {args.temperature}`. "
              f"Date: {started_at:%Y-%m-%d %H:%M} UTC."), "",
             f"Machine before: {machine_before}. After: {machine()}.", "",
             (f"Requests: the {requests} TRAINING text completions of benchmarks/routing_real.py (seeds "
              f"{TEXT_SEEDS['train']}.. of benchmarks/text_workloads.py; copy-edit greedy, prose at temperature "
              f"{args.temperature}), max_tokens {args.max_tokens}, {args.rounds} rounds, each request on plain and "
              "on n-gram back to back (order alternating); profiles/tiny at threads = 1. No held-out prompt was "
              f"sent. Failed requests: {failures}."), "",
             ("Rule (fixed before the run): the length with the largest min(plain / n-gram on copy-edit, n-gram / "
              "plain on prose): n-gram should win on the first and lose on the second."), "",
             ("| lookup length | n-gram / plain, copy-edit (mean, 95% interval over prompts) | n-gram / plain, prose "
              "| score |"),
             "|---|---|---|---|",
             *(f"| {r['length']} | {r['copy-edit'][0]:.3f} ({r['copy-edit'][1]:.3f}-{r['copy-edit'][2]:.3f}) | "
               f"{r['prose'][0]:.3f} ({r['prose'][1]:.3f}-{r['prose'][2]:.3f}) | {r['score']:.3f} |" for r in rows), "",
             f"Chosen: **{chosen['length']}** (score {chosen['score']:.3f}" +
             ("; above 1: n-gram wins on copy-edit and loses on prose at this length)." if chosen["score"] > 1 else
              "; not above 1: no length gave the mix the issue asks for on this training half)."), ""]
    args.out.write_text("\n".join(lines), encoding="utf-8")
    args.out.with_suffix(".json").write_text(json.dumps({"rows": rows, "chosen": chosen["length"],
                                                         "failures": failures}, indent=1), encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
