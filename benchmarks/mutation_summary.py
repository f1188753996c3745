"""Summarise a `mutmut run` (pyproject's [tool.mutmut]) from mutmut's own result files.

Reads `mutants/specd/**/*.py.meta` (the exit code of each mutant's test run, as mutmut records it)
and prints a Markdown table per module (killed, survived, no tests, timeout, not checked) and
every surviving mutant of the modules named, with its diff (`mutmut show`). Usage:

    .venv/bin/python benchmarks/mutation_summary.py [--survivors MODULE ...] > part.md
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests", 34: "skipped", 36: "timeout",
          24: "timeout", -24: "timeout", 152: "timeout", 255: "timeout", None: "not checked"}
COLUMNS = ("killed", "survived", "no tests", "timeout", "not checked")


def results(root: Path) -> dict[str, dict[str, str]]:
    """module -> mutant name -> status."""
    found: dict[str, dict[str, str]] = {}
    for meta in sorted(root.rglob("*.py.meta")):
        module = ".".join(meta.relative_to(root).with_suffix("").with_suffix("").parts)
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        found[module] = {name: STATUS.get(code, "suspicious") for name, code in codes.items()}
    return found


def diff_of(mutant: str) -> str:
    shown = subprocess.run([sys.executable, "-m", "mutmut", "show", mutant], capture_output=True, text=True,
                           check=False).stdout
    return "\n".join(line for line in shown.splitlines() if line.startswith(("-    ", "+    ", "-", "+"))
                     and not line.startswith(("---", "+++")))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--survivors", nargs="*", default=[], help="modules whose survivors to list, with diffs")
    args = parser.parse_args()
    found = results(Path("mutants"))
    total: Counter[str] = Counter()
    print("| module | " + " | ".join(COLUMNS) + " |\n|---|" + "---|" * len(COLUMNS))
    for module, statuses in found.items():
        counts = Counter(statuses.values())
        if not statuses:
            continue
        total.update(counts)
        print(f"| `{module}` | " + " | ".join(str(counts[c]) for c in COLUMNS) + " |")
    print("| **all** | " + " | ".join(f"**{total[c]}**" for c in COLUMNS) + " |")
    for module in args.survivors:
        for name, status in found.get(module, {}).items():
            if status == "survived":
                print(f"\n`{name}`\n```diff\n{diff_of(name)}\n```")


if __name__ == "__main__":
    main()
