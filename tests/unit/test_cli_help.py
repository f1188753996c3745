"""Every command's --help reads like a man page: no Python type names, no empty or broken defaults."""

from __future__ import annotations

import re

import pytest
import typer.testing

from specd.cli import command

PYTHONISMS = re.compile(r"<(str|int|float|bool|path|list\[[a-z]+\]|int range|float range)>|\{[a-z_]+\}|\(default \)|"
                        r"\(default  |list\[str\]|NoneType")


def _help(monkeypatch: pytest.MonkeyPatch, *args: str) -> str:
    monkeypatch.setattr(typer.testing, "_get_command", lambda app: command())
    result = typer.testing.CliRunner().invoke(typer.Typer(), [*args, "--help"], prog_name="specd",
                                              env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    return result.output


def test_every_commands_help_is_free_of_python_types(monkeypatch: pytest.MonkeyPatch) -> None:
    names = sorted(command().commands)
    assert {"switch", "rollback", "status", "import", "bench", "tune"} <= set(names)
    for name in ["", *names]:
        text = _help(monkeypatch, *([name] if name else []))
        found = PYTHONISMS.findall(text)
        assert not found, f"specd {name} --help shows {found}:\n{text}"


def test_arguments_read_as_names_in_usage(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "Usage: specd switch [OPTIONS] PROFILE\n" in _help(monkeypatch, "switch")
    assert "--n N " in _help(monkeypatch, "bench") and "--config PATH " in _help(monkeypatch, "status")


def test_version(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(typer.testing, "_get_command", lambda app: command())
    result = typer.testing.CliRunner().invoke(typer.Typer(), ["--version"], prog_name="specd")
    assert result.exit_code == 0 and re.fullmatch(r"specd \d+\.\d+\.\d+\n", result.output)


def test_choices_are_shown_as_the_cli_accepts_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--period NIGHT|...` was shown upper case, and `--period NIGHT` is refused: show what works."""
    assert "--period night|morning|afternoon|evening" in _help(monkeypatch, "pin")
    assert "--strategy auto|blue-green|restart" in _help(monkeypatch, "switch")
