"""Measured bounds of the fault tests, for benchmarks/results/fault-suite.md.

Each fault test asserts its bound and also calls `fault_results.record(...)` with what it measured.
When `SPECD_FAULT_RESULTS` names a file (benchmarks/fault_suite.py sets it), each record is appended
there as one JSON line; otherwise recording does nothing (the assertions are the test).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

import pytest

RESULTS_ENV = "SPECD_FAULT_RESULTS"


@dataclass(frozen=True)
class FaultRecorder:
    test: str

    def record(self, scenario: str, *, bound: str, measured: str) -> None:
        target = os.environ.get(RESULTS_ENV)
        if not target:
            return
        line = json.dumps({"test": self.test, "scenario": scenario, "bound": bound, "measured": measured,
                           "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        with open(target, "a", encoding="utf-8") as out:
            out.write(line + "\n")


@pytest.fixture
def fault_results(request: pytest.FixtureRequest) -> FaultRecorder:
    return FaultRecorder(request.node.nodeid)
