"""The mutation run over the proxy's request path, as a page: counts, and every mutant that lived.

    mutmut run                       # pyproject's [tool.mutmut]: specd/proxy/, the proxy's unit tests
    python benchmarks/mutation_report.py --layer proxy --out benchmarks/results/mutation-proxy.md

Reads `mutmut results` and `mutmut show` in the checkout. Each surviving mutant is listed with its
diff and a reason it is harmless, or the test that now kills it: the reasons of a kind are written
once (KINDS, matched on the diff) and the rest one by one (NOTES, by mutant name). A mutant that
matches neither is listed as "to review", so a new survivor cannot hide in a count.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import importlib
import platform
import re
import subprocess
import sys
from pathlib import Path

import psutil

MUTMUT = [sys.executable, "-m", "mutmut"]

# (kind, reason, test on the changed lines) for survivors that are harmless by their nature
KINDS: list[tuple[str, str, re.Pattern[str]]] = [
    ("text", ("the wording of a message or a description: nothing reads it back but a person (the sentences "
              "a user relies on are asserted word for word where they matter)"),
     re.compile(r"""^(?!.*\bb["']).*["'][^"']*["'].*$""")),
    ("log", "what a log line says or whether it says it: the journal's wording, not behaviour",
     re.compile(r"\blog\.(debug|info|warning|error|exception)\("))
]
FALSY = {"False", "0", "0.0", '""', "[]", "()"}

# the layers mutated ([tool.mutmut] in pyproject.toml): package, page title, notes module beside this file
LAYERS = {
    "proxy": ("specd.proxy.", "the proxy's request path (specd/proxy/)", "mutation_notes_proxy"),
    "deploy": ("specd.deploy.", "the switch transaction and its seams (specd/deploy/)", "mutation_notes_deploy"),
}


def notes_of(layer: str) -> dict[str, str]:
    sys.path.insert(0, str(Path(__file__).parent))
    return importlib.import_module(LAYERS[layer][2]).NOTES


def mutmut(*args: str) -> str:
    return subprocess.run([*MUTMUT, *args], capture_output=True, text=True, check=False).stdout


def diff_of(name: str) -> list[str]:
    """The mutant's changed lines, as `mutmut show` prints them (read in this process: one `mutmut show` per
    survivor starts mutmut each time, slow over hundreds of survivors)."""
    try:
        from mutmut.mutation.diff_apply import get_diff_for_mutant
    except ImportError:  # a mutmut without that module: ask the command
        shown = mutmut("show", name)
    else:
        module = re.split(r"\.x[_ǁ]", name, maxsplit=1)[0]
        shown = get_diff_for_mutant(name, path=module.replace(".", "/") + ".py")
    return [line for line in shown.splitlines() if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def note_matches(key: str, name: str) -> bool:
    """A NOTES key names one mutant (`..._mutmut_12`: that one only, not `_mutmut_120`), every mutant of a
    function (`x_warm_up`: its `__mutmut_N`, not `x_warm_up_bodies`'), or those a `..._mutmut_` prefix or a
    `...*` key starts."""
    if key.endswith("*"):
        return name.startswith(key[:-1])
    if re.search(r"__mutmut_\d+$", key):
        return name == key
    if key.endswith("__mutmut_"):
        return name.startswith(key)
    return name.startswith(f"{key}__mutmut_")


def classify(name: str, diff: list[str], notes: dict[str, str]) -> tuple[str, str]:
    for key, note in notes.items():
        if note_matches(key, name):
            return "noted", note
    if _falsy_for_none(diff):
        return "falsy", ("a falsy value (`False`, `0`, `\"\"`, `[]`) swapped for `None` where it is only "
                         "tested for truth or passed on to be: the same behaviour")
    changed = [line[1:].strip() for line in diff]
    for kind, reason, pattern in KINDS:
        if (changed and all(pattern.search(line) for line in changed)
                and (kind != "text" or _only_strings_differ(diff))):
            return kind, reason
    return "to review", ""


def _falsy_for_none(diff: list[str]) -> bool:
    removed = [line[1:] for line in diff if line.startswith("-")]
    added = [line[1:] for line in diff if line.startswith("+")]
    if len(removed) != 1 or len(added) != 1:
        return False
    before, after = re.findall(r"\w+|\S", removed[0]), re.findall(r"\w+|\S", added[0])
    if len(before) != len(after):
        return False
    changed = [(b, a) for b, a in zip(before, after, strict=True) if b != a]
    return len(changed) == 1 and changed[0][1] == "None" and changed[0][0] in FALSY


def _only_strings_differ(diff: list[str]) -> bool:
    """The removed and added lines are the same once str literals (not bytes) are blanked."""
    def blank(line: str) -> str:
        return re.sub(r"""(?<![bB])(["'])(?:\\.|(?!\1).)*\1""", '""', line[1:].strip())
    removed = [blank(line) for line in diff if line.startswith("-")]
    added = [blank(line) for line in diff if line.startswith("+")]
    return removed == added


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layer", choices=sorted(LAYERS), default="proxy")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--command", default="`mutmut run` (pyproject's `[tool.mutmut]`: every module of "
                        "the layer mutated; its unit tests, each mutant against the tests that run its "
                        "function)", help="how the mutants were run, for the page's first line")
    args = parser.parse_args()
    package, title, _ = LAYERS[args.layer]
    notes = notes_of(args.layer)
    results = [line.strip().rsplit(": ", 1) for line in mutmut("results", "--all", "true").splitlines()
               if ": " in line and line.strip().startswith(package)]  # this page: the layer's mutants
    counts = collections.Counter(status for _, status in results)
    per_module: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for name, status in results:
        per_module[name.split(".x")[0]][status] += 1
    lived = [(name, status) for name, status in results if status == "survived"]
    untested: dict[str, list[str]] = collections.defaultdict(list)  # function -> its mutants no unit test runs
    for name, status in results:
        if status == "no tests":
            untested[re.sub(r"__mutmut_\d+$", "", name)].append(name)
    untested_rows = [(function, len(names), classify(names[0], [], notes)[1] or "to review")
                     for function, names in sorted(untested.items())]
    rows = []
    for name, status in lived:
        diff = diff_of(name)
        kind, reason = classify(name, diff, notes)
        shown = " / ".join(f"`{line[:110]}`" for line in diff).replace("|", "\\|")
        rows.append((kind, name, status, shown, reason))
    kinds = collections.Counter(kind for kind, *_ in rows)
    lines = [
        f"# Mutation testing of {title}", "",
        (f"- command: {args.command}, then `python benchmarks/mutation_report.py --layer {args.layer} "
         f"--out benchmarks/results/mutation-{args.layer}.md`"),
        (f"- machine: {platform.node()}: {platform.platform()}, {psutil.cpu_count()} CPUs; Python "
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
        *(f"| {kind} | `{name.removeprefix(package)}` | {status} | {shown} | {reason} |"
          for kind, name, status, shown, reason in sorted(rows)),
        "", "## Functions no unit test runs (their mutants: *no tests*)", "",
        (f"{sum(n for _, n, _ in untested_rows)} mutants in {len(untested_rows)} functions; "
        f"{sum(n for _, n, why in untested_rows if why == 'to review')} of them to review."), "",
        "| function | mutants | why, or where it is tested |", "|---|---|---|",
        *(f"| `{function.removeprefix(package)}` | {n} | {why} |" for function, n, why in untested_rows),
    ]
    text = "\n".join(lines) + "\n"
    if args.out is not None:
        args.out.write_text(text)
    print("\n".join(lines[:12]))


if __name__ == "__main__":
    main()
