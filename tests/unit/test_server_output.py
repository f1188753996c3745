"""Where no systemd-journald runs, llama-server's output goes to a file in the state directory and a
failed switch shows its last lines. tests/system/test_switch_failures.py checks it against the real
systemd and llama-server; these are the rules, in milliseconds."""

from __future__ import annotations

from pathlib import Path

import pytest

from specd import paths
from specd.deploy.systemd import journal_tail, output_tail
from specd.engines.journal import READ_LINES
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


def test_a_short_output_file_is_shown_whole_from_its_first_byte(tmp_path: Path) -> None:
    output = tmp_path / "llama.service.log"
    output.write_text("first line\nsecond line\n")
    assert output_tail(output, 10) == "first line\nsecond line"
    assert output_tail(tmp_path / "absent.log", 10) is None


def test_output_that_is_not_utf8_is_shown_with_replacement_characters(tmp_path: Path) -> None:
    output = tmp_path / "llama.service.log"
    output.write_bytes(b"model \xff\xfe loaded\nerror: bad magic\n")
    assert output_tail(output, 5) == "model \ufffd\ufffd loaded\nerror: bad magic"


def fake_journalctl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prints: str) -> Path:
    """A FAKE journalctl on PATH that notes its arguments (no journald runs in these containers: the
    real one is read wherever journald runs, by the same command)."""
    bin_dir, argv_file = tmp_path / "bin", tmp_path / "journalctl-argv"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "journalctl"
    script.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {argv_file}\nprintf '%s' '{prints}'\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    (tmp_path / "journal-socket").touch()  # journald "runs": its socket exists
    return argv_file


@pytest.mark.parametrize(("scope", "user_flag"), [("user", ["--user"]), ("system", [])])
def test_with_journald_the_units_lines_come_from_journalctl_for_its_scope(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scope: str, user_flag: list[str]) -> None:
    lines = "".join(f"line {n}\n" for n in range(40))
    argv_file = fake_journalctl(tmp_path, monkeypatch, lines)
    note = journal_tail("llama.service", scope, lines=3, journal_socket=tmp_path / "journal-socket")
    assert note == "line 37\nline 38\nline 39"
    assert argv_file.read_text().split() == [*user_flag, "--no-pager", "-o", "cat", "-n", str(READ_LINES), "-u",
                                             "llama.service"]


@pytest.mark.parametrize("prints", ["", "-- No entries --\n"])
def test_a_journal_without_lines_for_the_unit_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      prints: str) -> None:
    fake_journalctl(tmp_path, monkeypatch, prints)
    note = journal_tail("llama.service", "user", journal_socket=tmp_path / "journal-socket")
    assert note == "(the journal has no lines for this unit)"


def test_without_journalctl_the_note_says_there_is_no_journal(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "journal-socket").touch()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert journal_tail("llama.service", "user", journal_socket=tmp_path / "journal-socket").startswith(
        "(no journal: ")
