"""The mutation run over the proxy's request path, as a page: counts, and every mutant that lived.

    mutmut run                       # pyproject's [tool.mutmut]: specd/proxy/, the proxy's unit tests
    python benchmarks/mutation_report.py --out benchmarks/results/mutation-proxy.md

Reads `mutmut results` and `mutmut show` in the checkout. Each surviving mutant is listed with its
diff and a reason it is harmless, or the test that now kills it: the reasons of a kind are written
once (KINDS, matched on the diff) and the rest one by one (NOTES, by mutant name). A mutant that
matches neither is listed as "to review", so a new survivor cannot hide in a count.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import platform
import re
import subprocess
import sys
from pathlib import Path

import psutil

MUTMUT = [sys.executable, "-m", "mutmut"]
LIVED = ("survived", "no tests")

# (kind, reason, test on the removed and added line) for survivors that are harmless by their nature
KINDS: list[tuple[str, str, re.Pattern[str]]] = [
    ("text", ("the wording of a log line, a message or a description: nothing reads it back but a person "
              "(the sentences a user relies on are asserted word for word where they matter)"),
     re.compile(r"""^(?!.*\bb["']).*["'][^"']*["'].*$""")),
    ("falsy", ("`False`/`0`/`[]` swapped for `None` (or `True` for a truthy value) where the value is only "
               "tested for truth: the same behaviour"), re.compile(r"(=|\()\s*None\b|\bNone\)")),
]

# mutant-name prefix -> why it is harmless, or which test now kills it
NOTES: dict[str, str] = {
    "specd.proxy.warmup.x_warm_up": "the empty warm-up's counts: `Warmed.describe` reads only `sent`, which "
                                    "is falsy either way",
    "specd.proxy.relay.xǁRelayǁstop": "a second stop closes the upstream again; `close` is idempotent",
    "specd.proxy.http1.client.xǁUpstreamPoolǁdiscard_idle": "defence only: the re-send after a drop on a "
                                                            "reused connection goes on a fresh one whatever the "
                                                            "pool holds; closing the other idle ones saves a "
                                                            "later request from meeting them",
}


def mutmut(*args: str) -> str:
    return subprocess.run([*MUTMUT, *args], capture_output=True, text=True, check=False).stdout


def diff_of(name: str) -> list[str]:
    return [line for line in mutmut("show", name).splitlines()
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def classify(name: str, diff: list[str]) -> tuple[str, str]:
    for prefix, note in NOTES.items():
        if name.startswith(prefix):
            return "noted", note
    changed = [line[1:].strip() for line in diff]
    for kind, reason, pattern in KINDS:
        if (changed and all(pattern.search(line) for line in changed)
                and (kind != "text" or _only_strings_differ(diff))):
            return kind, reason
    return "to review", ""


def _only_strings_differ(diff: list[str]) -> bool:
    """The removed and added lines are the same once str literals (not bytes) are blanked."""
    def blank(line: str) -> str:
        return re.sub(r"""(?<![bB])(["'])(?:\\.|(?!\1).)*\1""", '""', line[1:].strip())
    removed = [blank(line) for line in diff if line.startswith("-")]
    added = [blank(line) for line in diff if line.startswith("+")]
    return removed == added


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    results = [line.strip().rsplit(": ", 1) for line in mutmut("results", "--all", "true").splitlines()
               if ": " in line]
    counts = collections.Counter(status for _, status in results)
    per_module: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for name, status in results:
        per_module[name.split(".x")[0]][status] += 1
    lived = [(name, status) for name, status in results if status in LIVED]
    rows = []
    for name, status in lived:
        diff = diff_of(name)
        kind, reason = classify(name, diff)
        shown = " / ".join(f"`{line[:110]}`" for line in diff).replace("|", "\\|")
        rows.append((kind, name, status, shown, reason))
    kinds = collections.Counter(kind for kind, *_ in rows)
    lines = [
        "# Mutation testing of the proxy's request path (specd/proxy/)", "",
        ("- command: `mutmut run` (pyproject's `[tool.mutmut]`: every module of specd/proxy/ mutated; the proxy's "
         "unit tests, each mutant against the tests that run its function), then "
         "`python benchmarks/mutation_report.py --out benchmarks/results/mutation-proxy.md`"),
        (f"- machine: {platform.node()}: {platform.platform()}, {psutil.cpu_count()} CPUs (shared); Python "
         f"{sys.version.split()[0]}; date {datetime.datetime.now(datetime.UTC):%Y-%m-%d}"),
        ("- what: a mutant *killed* made a test fail; *timeout* made one hang past mutmut's bound (also caught); "
         "*survived* passed every test that runs its function; *no tests*: no unit test runs the function "
         "(the system tier may); *not checked*: the run's time budget ended first"),
        f"- counts: {dict(counts)}; survivors by kind: {dict(kinds)}", "",
        "| module | killed | timeout | survived | no tests | not checked |", "|---|---|---|---|---|---|",
        *(f"| {module} | {c['killed']} | {c['timeout']} | {c['survived']} | {c['no tests']} | {c['not checked']} |"
          for module, c in sorted(per_module.items())),
        "", "## Every mutant that lived", "", "| kind | mutant | status | change | why it is harmless, or the test |",
        "|---|---|---|---|---|",
        *(f"| {kind} | `{name.removeprefix('specd.proxy.')}` | {status} | {shown} | {reason} |"
          for kind, name, status, shown, reason in sorted(rows)),
    ]
    text = "\n".join(lines) + "\n"
    if args.out is not None:
        args.out.write_text(text)
    print("\n".join(lines[:12]))


if __name__ == "__main__":
    main()
