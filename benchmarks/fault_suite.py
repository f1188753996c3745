"""Run issue 21's fault-injection suite and write its result file (benchmarks/results/fault-suite.md
and .json): each scenario, the bound its test asserts, what this run measured, and pass or fail.

The tests assert the bounds; each also records what it measured through the `fault_results`
fixture (tests/system/fault_results.py), which appends to the file named by SPECD_FAULT_RESULTS.
This script sets that variable, runs pytest on the fault tests (the real private systemd, the real
llama-server and tiny model, and the FAKE server where a real one cannot produce the fault), and
joins the records with pytest's own per-test outcome (its JUnit XML). The load average before and
after is written too: the bounds are wall-clock times on a shared 2-core box.

    .venv/bin/python benchmarks/fault_suite.py            # writes benchmarks/results/fault-suite.*
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
FAULT_TESTS = (
    "tests/system/test_fault_poison.py",
    "tests/system/test_fault_interrupts.py",
    "tests/system/test_drain_interrupt.py",
    "tests/system/test_fault_daemon_signals.py",
    "tests/system/test_fault_big_body.py",
    "tests/system/test_fault_hostile_burst.py",
    "tests/system/test_fault_backend.py",
    "tests/system/test_fault_suite.py",
    "tests/unit/test_proxy_poison.py",
    "tests/unit/test_proxy.py::test_shutdown_answers_held_and_unanswered_requests_503_at_once_not_500",
    "tests/unit/test_transaction.py::test_an_interrupted_switch_is_never_recorded_as_a_hand_edit",
)


def outcomes(junit: Path) -> dict[str, dict[str, Any]]:
    """pytest's node id -> outcome and seconds, from its JUnit XML."""
    found: dict[str, dict[str, Any]] = {}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        module = case.get("classname", "").replace(".", "/")
        node = f"{module}.py::{case.get('name')}"
        failed = case.find("failure") is not None or case.find("error") is not None
        skipped = case.find("skipped") is not None
        found[node] = {"outcome": "failed" if failed else "skipped" if skipped else "passed",
                       "seconds": round(float(case.get("time", "0")), 1)}
    return found


def git_commit() -> str:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                          check=False).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                           capture_output=True, text=True, check=False).stdout.strip()
    return f"{head}{' + uncommitted changes' if dirty else ''}"


def run(pytest_args: list[str]) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="specd-fault-suite-"))
    records_path, junit = work / "records.jsonl", work / "junit.xml"
    env = {**os.environ, "SPECD_FAULT_RESULTS": str(records_path)}
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", f"--junitxml={junit}",
               *FAULT_TESTS, *pytest_args]
    load_before = os.getloadavg()
    started = time.time()
    exit_code = subprocess.run(command, cwd=REPO, env=env, check=False).returncode
    seconds = time.time() - started
    records = [json.loads(line) for line in records_path.read_text().splitlines()] if records_path.exists() else []
    tests = outcomes(junit)
    return {
        "command": "python benchmarks/fault_suite.py" + "".join(f" {a}" for a in pytest_args),
        "pytest": " ".join(["pytest", *FAULT_TESTS]),
        "machine": f"{platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)), "specd": git_commit(),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "seconds": round(seconds, 1), "pytest_exit": exit_code,
        "tests": tests, "records": records,
    }


def markdown(report: dict[str, Any], raw: str = "fault-suite.json") -> str:
    tests: dict[str, dict[str, Any]] = report["tests"]
    passed = sum(t["outcome"] == "passed" for t in tests.values())
    lines = [
        "# Fault-injection suite (issue 21): each scenario, its bound, what this run measured",
        "",
        f"- command: `{report['command']}` (runs `{report['pytest']}`)",
        (f"- machine: {report['machine']}; load average (1, 5, 15 min) {report['load_average_before']} before, "
         f"{report['load_average_after']} after (the box is shared: bounds are wall-clock)"),
        f"- date: {report['date']}, specd {report['specd']}",
        (f"- result: {passed} of {len(tests)} tests passed in {report['seconds']:.0f} s (pytest exit "
         f"{report['pytest_exit']})"),
        ("- against: the real specd daemon as a unit of a private `systemd --user`, its proxy, the real "
         "llama-server (llama.cpp from the llama-cpp-python 0.3.36 sdist) with Gemma 3 270M Q4_K_M; the FAKE "
         "server (tests/fakes/fake_llama_server.py) where a real one cannot produce the fault: the poison "
         "request's abort, 500 and invalid JSON answers, 300 instant answers"),
        f"- raw: [{raw}]({raw})",
        "",
        "| scenario | bound (asserted) | measured in this run | test | result |",
        "|---|---|---|---|---|",
    ]
    recorded_tests = set()
    for record in report["records"]:
        node = record["test"]
        base = node.split("[")[0]
        recorded_tests.add(base)
        outcome = tests.get(node, tests.get(base, {"outcome": "not run"}))["outcome"]
        lines.append(f"| {record['scenario']} | {record['bound']} | {record['measured']} | `{node}` | {outcome} |")
    for node, test in sorted(tests.items()):
        if node not in recorded_tests:
            lines.append(f"| (no timing: see the test) | its assertions | — | `{node}` | {test['outcome']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=RESULTS / "fault-suite")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest after the test list (e.g. -k poison)")
    args = parser.parse_args()
    report = run(args.pytest_args)
    report["command"] = shlex.join(["python", "benchmarks/fault_suite.py", *sys.argv[1:]])  # --out too, as typed
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    text = markdown(report, args.out.with_suffix(".json").name)
    args.out.with_suffix(".md").write_text(text)
    print(text)
    sys.exit(report["pytest_exit"])


if __name__ == "__main__":
    main()
