"""A pytest plugin loaded for every run (pyproject's addopts): under CI=true a skipped test is a
failed test. A skip hides a check that did not run; CI must prove each one ran.

It also lets the Ctrl-C tests interrupt the specd they start: a runner started as a background job
of a non-interactive shell (`./scripts/test.sh &` inside a script) ignores SIGINT, every process it
starts inherits that, and such a specd rightly cannot be interrupted (seen 2026-11-25: the three
Ctrl-C tests failed only when the suite ran that way)."""

from __future__ import annotations

import os
import signal
from collections.abc import Generator
from typing import Any

import pytest


def pytest_configure(config: pytest.Config) -> None:
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # children start with SIGINT's default


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI") == "true" and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true, which fails on any skip: {report.longrepr}"
