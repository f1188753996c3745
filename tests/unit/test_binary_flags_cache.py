"""The flags a binary accepts are cached by its sha256, except for a script: a wrapper keeps its
bytes while the llama-server it runs is upgraded or swapped for a fork, and specd must see the new
options (a profile using a flag the new build added must not be refused from a stale cache)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from specd.profiles.flags import binary_flags

OLD_HELP = "-m,    --model FNAME                    model path\n--port PORT                             port\n"
NEW_HELP = OLD_HELP + "--spec-type [none|ngram-mod|mtp]        speculative type\n"


def _executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECD_CACHE", str(tmp_path / "cache"))


def test_a_wrapper_script_reflects_an_upgrade_of_what_it_runs(tmp_path: Path) -> None:
    help_file = tmp_path / "help.txt"
    help_file.write_text(OLD_HELP)
    wrapper = _executable(tmp_path / "llama-wrapper", f"#!/bin/sh\ncat {help_file}\n")
    assert not binary_flags(wrapper).has("--spec-type")
    help_file.write_text(NEW_HELP)  # the build behind the wrapper was upgraded; the wrapper is unchanged
    assert binary_flags(wrapper).has("--spec-type")

