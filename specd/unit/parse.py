"""Read llama-server units back: ExecStart argv and Environment= of specd's or hand-written units.

Used by `specd import`, and to find the alias and port of a unit whose profile file is gone
(reverting to it, rolling back to it). Follows systemd.syntax(7) for the parts units use.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from specd.errors import UsageError


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


def _logical_lines(text: str) -> list[str]:
    lines: list[str] = []
    pending = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not pending and (stripped.startswith(("#", ";"))):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        lines.append(pending + stripped)
        pending = ""
    if pending:
        lines.append(pending)
    return lines


def _unescape(word: str) -> str:
    return word.replace("%%", "\0pct\0").replace("$$", "$").replace("\0pct\0", "%")


def _split(value: str, where: str) -> list[str]:
    try:
        return [_unescape(word) for word in shlex.split(value, posix=True)]
    except ValueError as exc:
        raise UsageError(f"{where}: cannot parse {value[:80]!r}: {exc}") from exc


def parse_unit(text: str, where: str = "unit") -> UnitCommand:
    section = ""
    exec_start: list[str] = []
    environment: dict[str, str] = {}
    for line in _logical_lines(text):
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        if section != "Service" or "=" not in line:
            continue
        key, value = (part.strip() for part in line.split("=", 1))
        if key == "ExecStart":
            if not value:
                exec_start = []
                continue
            words = _split(value, where)
            while words and words[0][:1] in "-@+!:" and not words[0].startswith("/"):
                words[0] = words[0][1:] or words.pop(0)
            exec_start = words
        elif key == "Environment":
            for assignment in _split(value, where):
                name, _, env_value = assignment.partition("=")
                environment[name] = env_value
    if not exec_start:
        raise UsageError(f"{where}: no ExecStart= in its [Service] section")
    return UnitCommand(exec_start, environment)
