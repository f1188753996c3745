"""Speculation must be seen working, through the CLI on a private systemd.

The servers are FAKE (tests/fakes/fake_llama_server.py): no real build at hand accepts a speculator
and then never drafts (one fork does so with `--spec-type ngram-*` on hybrid targets), nor turns
speculation on by default (llama.cpp's pending PR #28391). `never-drafts` answers with timings that
never carry a draft; `speculates` drafts whenever a speculator is on; `--fake-spec-default-on`
(in front of every argument, --help included) is a build that runs ngram-mod unless told not to.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.conftest import Box

pytestmark = [pytest.mark.systemd, pytest.mark.llama, pytest.mark.usefixtures("real_server")]
FAKE = Path(__file__).parents[1] / "fakes" / "fake_llama_server.py"


def fake_binary(directory: Path, *, default_on: bool = False) -> Path:
    binary = directory / ("fake-default-on-server" if default_on else "fake-llama-server")
    extra = "'--fake-spec-default-on', " if default_on else ""
    binary.write_text(f"#!{sys.executable}\nimport runpy, sys\nsys.argv[1:1] = [{extra}]\n"
                      f"runpy.run_path({str(FAKE)!r}, run_name='__main__')\n")
    binary.chmod(0o755)
    return binary


def add_profile(box: Box, name: str, mode: str, spec_type: str, *, default_on: bool = False,
                args: tuple[str, ...] = ()) -> None:
    words = ", ".join(f'"{a}"' for a in ("--fake-mode", mode, *args))
    box.write_profile(name, f'inherits = "base"\nbinary = "{fake_binary(box.root, default_on=default_on)}"\n'
                            f'args = [{words}]\n[speculative]\ntype = "{spec_type}"\n')


@pytest.mark.own_threads


def test_a_speculator_that_never_drafts_is_flagged_excluded_and_shown(box: Box) -> None:
    add_profile(box, "fake-plain", "speculates", "none")
    add_profile(box, "fake-live", "speculates", "ngram-simple")
    add_profile(box, "fake-dead", "never-drafts", "ngram-simple")
    box.specd("switch", "fake-plain", check=True)

    result = box.specd("tune", "--workload", "code", "--n", "4", "--max-n", "16", "--max-tokens", "16", "--no-verify",
                       "--json", "--profile", "fake-live", "--profile", "fake-dead", check=True)

    decision = json.loads(result.stdout)
    assert set(decision["estimates"]) == {"fake-plain", "fake-live"}, decision
    notes = "\n".join(decision["notes"])
    assert "fake-dead: configured but inactive on this model/binary" in notes
    assert "fake-dead: left out of the decision" in notes
    # it drafted: no note of its own (a note on the box's noise may name it, as any candidate)
    assert not any(note.startswith("fake-live:") for note in decision["notes"]), notes
    listing = {p["name"]: p for p in json.loads(box.specd("profiles", "--json", check=True).stdout)}
    assert any("configured but inactive" in p for p in listing["fake-dead"]["problems"]), listing["fake-dead"]
    assert not any("inactive" in p for p in listing["fake-live"]["problems"] + listing["fake-plain"]["problems"])
    table = box.specd("profiles", check=True).stdout
    assert "configured but inactive" in " ".join(table.split())
    # An edited profile is judged afresh: the verdict was on the profile as it was.
    box.edit_profile("fake-dead", threads=1)
    listing = {p["name"]: p for p in json.loads(box.specd("profiles", "--json", check=True).stdout)}
    assert not any("inactive" in p for p in listing["fake-dead"]["problems"])


def test_type_none_on_a_default_on_build_renders_the_off_flag_and_verify_sees_no_drafts(box: Box) -> None:
    add_profile(box, "fake-none", "speculates", "none", default_on=True)
    shown = json.loads(box.specd("show", "fake-none", "--json", check=True).stdout)["argv"]
    assert shown[shown.index("--no-spec-type") + 1] == "ngram-mod"

    box.specd("switch", "fake-none", check=True)
    verified = box.specd("verify", "fake-none", "--against", "fake-none", "--json", check=True)
    report = json.loads(verified.stdout)
    assert report["drafted"] == {"fake-none": 0} and report["draft_problems"] == []

    # The same build with a speculator slipped in through args: verify catches the drafts.
    add_profile(box, "fake-smuggled", "speculates", "none", default_on=True, args=("--spec-type", "ngram-simple"))
    box.specd("switch", "fake-smuggled", check=True)
    caught = box.specd("verify", "fake-smuggled", "--against", "fake-smuggled")
    assert caught.returncode != 0
    assert 'fake-smuggled has type = "none" but its server drafted' in caught.stderr, caught.stderr
    assert "Traceback" not in caught.stderr
