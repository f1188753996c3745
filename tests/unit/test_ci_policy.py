"""CI fails on a skip: the policy plugin turns skips into failures under CI=true, and only then."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

SKIPPING = """
import pytest

def test_skipped():
    pytest.skip("no GPU here")

def test_passes():
    assert True
"""


def test_a_skip_fails_the_run_under_ci(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    pytester.makepyfile(SKIPPING)
    result = pytester.runpytest("-p", "tests.ci_policy")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*skipped under CI=true*"])


def test_outside_ci_a_skip_stays_a_skip(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    pytester.makepyfile(SKIPPING)
    pytester.runpytest("-p", "tests.ci_policy").assert_outcomes(passed=1, skipped=1)
