"""Where no systemd-journald runs, llama-server's output goes to a file in the state directory and a
failed switch shows its last lines. tests/system/test_switch_failures.py checks it against the real
systemd and llama-server; these are the rules, in milliseconds."""

from __future__ import annotations

from pathlib import Path

import pytest

from specd import paths
from specd.deploy.systemd import journal_tail
from specd.profiles.load import load_profile
from specd.unit.render import render_unit

TEMPLATE = "[Service]\nExecStart=@EXEC_START@\nRestart=on-failure\n\n[Install]\nWantedBy=@WANTED_BY@\n"


def profile_dir(tmp_path: Path, extra: str = "") -> Path:
    (tmp_path / "p.toml").write_text('binary = "/usr/bin/true"\nmodel = "/m.gguf"\nalias = "m"\nport = 8080\n' + extra)
    return tmp_path


def test_the_unit_appends_its_output_to_the_state_dir_file_named_by_the_unit(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "st%te"))
    profile = load_profile(profile_dir(tmp_path), "p")
    text = render_unit(profile, ["/usr/bin/true"], scope="user", template=TEMPLATE,
                       output_file=paths.server_output_pattern())
    service = text.split("[Install]")[0]
    assert f"StandardOutput=append:{tmp_path}/st%%te/specd/%n.log\n" in service  # % doubled, %n the unit's name
    assert "StandardError=inherit\n" in service
    assert "StandardOutput" not in render_unit(profile, ["/usr/bin/true"], scope="user", template=TEMPLATE)


def test_a_profile_that_routes_its_output_itself_keeps_its_own(tmp_path: Path) -> None:
    profile = load_profile(profile_dir(tmp_path, '[systemd.Service]\nStandardOutput = "null"\n'), "p")
    text = render_unit(profile, ["/usr/bin/true"], scope="user", template=TEMPLATE, output_file="/x/%n.log")
    assert "StandardOutput=null" in text and "append:" not in text and "StandardError" not in text


def test_the_revert_message_ends_with_the_files_last_lines(tmp_path: Path) -> None:
    output = tmp_path / "llama.service.log"
    output.write_text("".join(f"load line {n}\n" for n in range(100)) + "error: failed to load model\n")
    note = journal_tail("llama.service", "user", lines=5, journal_socket=tmp_path / "absent", output=output)
    assert note.splitlines() == [f"(no systemd-journald runs on this box; from {output})", "load line 96",
                                 "load line 97", "load line 98", "load line 99", "error: failed to load model"]


def test_without_the_file_the_message_says_why_there_are_no_lines(tmp_path: Path) -> None:
    note = journal_tail("llama.service", "user", journal_socket=tmp_path / "absent", output=tmp_path / "none.log")
    assert "no systemd-journald" in note and str(tmp_path / "none.log") in note and "ExecStart=" in note
