"""Read llama-server units back: ExecStart argv and Environment= of specd's or hand-written units.

Used by `specd import`, and to find the alias and port of a unit whose profile file is gone
(reverting to it, rolling back to it). Follows systemd.syntax(7) for the parts units use.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specd.errors import UsageError
from specd.unit.syntax import (
    UnitContext,
    expand_variables,
    logical_lines,
    parse_assignments,
    parse_environment_file,
    read_unit_text,
    referenced_variables,
    resolve_specifiers,
    split_words,
)


@dataclass(frozen=True)
class UnitCommand:
    argv: list[str]
    environment: dict[str, str]

    def option(self, *names: str) -> str | None:
        for index, arg in enumerate(self.argv[:-1]):
            if arg in names:
                return self.argv[index + 1]
        for arg in self.argv:
            for name in names:
                if name.startswith("--") and arg.startswith(name + "="):
                    return arg.split("=", 1)[1]
        return None

    @property
    def alias(self) -> str | None:
        value = self.option("--alias", "-a")
        return value.split(",")[0] if value else None

    @property
    def base_url(self) -> str:
        host = self.option("--host") or "127.0.0.1"
        port = self.option("--port") or "8080"
        return f"http://{host}:{port}"


@dataclass(frozen=True)
class Directive:
    section: str
    key: str
    value: str
    line: int


@dataclass(frozen=True)
class ParsedUnit:
    """A unit as systemd reads it: the resolved command, its environment, and everything else."""

    command: UnitCommand
    directives: tuple[Directive, ...]
    notes: tuple[str, ...]  # where each resolved value came from (specifiers, variables, files)


def _exec_words(value: str, where: str) -> list[str]:
    words = split_words(value, where)
    while words and words[0][:1] in "-@+!:|" and not words[0].startswith("/"):
        words[0] = words[0][1:] or words.pop(0)
    return words


def _environment_file(value: str, context: UnitContext, here: str, notes: list[str]) -> dict[str, str]:
    """An EnvironmentFile= line's variables; `-path` may be missing, as systemd allows."""
    optional = value.startswith("-")
    path = Path(resolve_specifiers(value.removeprefix("-"), context, here))
    try:
        file_text = read_unit_text(path)
    except UsageError:
        if optional:
            notes.append(f"EnvironmentFile={path} (optional) does not exist here: skipped")
            return {}
        raise UsageError(f"{here}: EnvironmentFile={path} cannot be read; systemd would refuse to start "
                         "the unit too (prefix it with - if it is optional)") from None
    loaded = parse_environment_file(file_text, str(path))
    if loaded:
        notes.append(f"{', '.join(sorted(loaded))} from EnvironmentFile={path}")
    return loaded


def read_unit(text: str, where: str = "unit", context: UnitContext | None = None) -> ParsedUnit:
    """Parse a unit's text with systemd's rules: specifiers, Environment=, EnvironmentFile=
    (read from disk, `-` prefix optional), variables in ExecStart=, quoting and C escapes."""
    context = context or UnitContext.for_unit(Path(where).name if where.endswith(".service") else "unit.service",
                                              "user")
    section = ""
    exec_start: list[str] | None = None
    exec_line = 0
    environment: dict[str, str] = {}
    directives: list[Directive] = []
    notes: list[str] = []
    for line in logical_lines(text):
        here = f"{where} line {line.line}"
        if line.text.startswith("[") and line.text.endswith("]"):
            section = line.text[1:-1]
            continue
        if "=" not in line.text:
            notes.append(f"{here}: {line.text[:60]!r} is neither a [Section] nor KEY=value; systemd ignores it")
            continue
        key, value = (part.strip() for part in line.text.split("=", 1))
        if section == "Service" and key == "ExecStart":
            if not value:
                exec_start = None
                continue
            exec_start = [resolve_specifiers(word, context, here) for word in _exec_words(value, here)]
            exec_line = line.line
        elif section == "Service" and key == "Environment":
            for name, env_value in parse_assignments(resolve_specifiers(value, context, here), here).items():
                environment[name] = env_value
        elif section == "Service" and key == "EnvironmentFile":
            environment.update(_environment_file(value, context, here, notes))
        else:
            directives.append(Directive(section, key, value, line.line))
    if not exec_start:
        raise UsageError(f"{where}: no ExecStart= in its [Service] section")
    used = referenced_variables(exec_start)
    for name in sorted(used):
        source = "unset: expands to nothing" if name not in environment else "from the unit's environment"
        notes.append(f"ExecStart (line {exec_line}) uses ${name}: {source}")
    argv = expand_variables(exec_start, environment)
    return ParsedUnit(UnitCommand(argv, environment), tuple(directives), tuple(notes))


def parse_unit(text: str, where: str = "unit") -> UnitCommand:
    """The command of a unit (specd's own or a hand-written one), read with systemd's rules."""
    return read_unit(text, where).command
