"""How long the proxy's in-loop work on one hostile request takes: task classification and JSON parsing.

The proxy classifies each request (specd.traffic.taskclass.task_class_of) and parses its body in the
event loop, so their worst case is a stall of every stream. Measured in-process, single-threaded,
best of `--repeat` runs (less is the machine's noise):

- the task-class pattern before commit d6dc5eb (`\\w+\\(`) on one long word: quadratic;
- today's classifier (specd.traffic.taskclass.classify) on one long word, and on "a(a(a(...";
- the proxy's bounded classification on a 2 MB string and on a list of text parts;
- json.loads of a chat body at the proxy's default max_body_bytes (64 MiB).

    .venv/bin/python benchmarks/event_loop_stalls.py [--repeat 3] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from specd.proxy.proxy import ProxySettings
from specd.traffic.taskclass import CLASSIFY_CHARS, classify, task_class_of

REPO = Path(__file__).resolve().parent.parent
OLD_CODE_SHAPE = re.compile(  # specd/taskclass.py before d6dc5eb
    r"^\s*(?:def |class |import |from \S+ import |fn |func |#include|public |const |let |var )"
    r"|[{};]\s*$|=>|\w+\([^)]*\)\s*[:{]",
    re.MULTILINE,
)


def best_of(repeat: int, work: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return min(times)


def user(content: object) -> list[dict[str, object]]:
    return [{"role": "user", "content": content}]


def parts(count: int, text: str) -> list[dict[str, str]]:
    return [{"type": "text", "text": text} for _ in range(count)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    part = "a(" * (CLASSIFY_CHARS // 2)  # one part at the proxy's per-part bound
    body_bytes = ProxySettings.max_body_bytes
    overhead = len(json.dumps({"messages": user(""), "max_tokens": 8}))
    body = json.dumps({"messages": user("x" * (body_bytes - overhead)), "max_tokens": 8}).encode()
    cases: list[tuple[str, str, Callable[[], object]]] = [
        ("pattern before d6dc5eb", "one 16 KB word", lambda: OLD_CODE_SHAPE.findall("a" * 16384)),
        ("pattern before d6dc5eb", "one 32 KB word", lambda: OLD_CODE_SHAPE.findall("a" * 32768)),
        ("pattern before d6dc5eb", "one 64 KB word", lambda: OLD_CODE_SHAPE.findall("a" * 65536)),
        ("classify (today)", "one 64 KB word", lambda: classify(user("a" * 65536))),
        ("classify (today)", "one 1 MB word", lambda: classify(user("a" * (1 << 20)))),
        ("classify (today)", '"a(" x 2 K (4 KB)', lambda: classify(user("a(" * 2048))),
        ("classify (today)", '"a(" x 8 K (16 KB)', lambda: classify(user("a(" * 8192))),
        ("classify (today)", '"a(" x 16 K (32 KB)', lambda: classify(user("a(" * 16384))),
        ("proxy: task_class_of", 'a 2 MB string of "a("', lambda: task_class_of(user("a(" * (1 << 20)))),
        ("proxy: task_class_of", f'8 text parts of {CLASSIFY_CHARS} chars "a("',
         lambda: task_class_of(user(parts(8, part)))),
        ("proxy: task_class_of", f'16 text parts of {CLASSIFY_CHARS} chars "a("',
         lambda: task_class_of(user(parts(16, part)))),
        ("proxy: task_class_of", f'64 text parts of {CLASSIFY_CHARS} chars "a(" (the most it keeps)',
         lambda: task_class_of(user(parts(64, part)))),
        ("proxy: json.loads", f"a {len(body) / (1 << 20):.0f} MiB chat body (max_body_bytes)",
         lambda: json.loads(body)),
    ]
    load_before = os.getloadavg()[0]
    rows = []
    for what, text, work in cases:
        seconds = best_of(1 if "64 text parts" in text else args.repeat, work)
        rows.append(f"| {what} | {text} | {seconds * 1000:,.1f} |")
        print(rows[-1], file=sys.stderr, flush=True)
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip()
    report = "\n".join([
        "# Event-loop stalls: task classification and body parsing on hostile requests",
        "",
        f"- command: `{' '.join(['.venv/bin/python', 'benchmarks/event_loop_stalls.py', *sys.argv[1:]])}`",
        (f"- machine: {platform.platform()}, {os.cpu_count()} CPUs, shared with other jobs: 1-min load average "
        f"{load_before:.1f} before, {os.getloadavg()[0]:.1f} after"),
        (f"- date: {datetime.now(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}, specd {commit}, Python "
        f"{platform.python_version()}"),
        (f"- in-process, one thread, best of {args.repeat} (the 64-part case once); each figure is a stall of "
        "every stream when it runs in the proxy's event loop"),
        "",
        "| code | input | ms |",
        "|---|---|---|",
        *rows,
        "",
    ])
    print(report)
    if args.out is not None:
        args.out.write_text(report)


if __name__ == "__main__":
    main()
