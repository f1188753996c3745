"""systemd's unit-file syntax, as systemd itself reads it (systemd.syntax(7), systemd.unit(5),
systemd.service(5), systemd.exec(5)). Pure functions over text; no systemd needed.

- Logical lines: a trailing backslash continues a line; comment lines (# or ;) inside a
  continuation are skipped, as systemd skips them.
- Words (ExecStart=, Environment=): whitespace separates; single and double quotes group; C escapes
  (\\n \\t \\xHH \\NNN \\uXXXX \\s ...) are decoded inside and outside quotes.
- Specifiers (specifiers.py): resolved for the unit's name and scope and the box, as systemd 252 does.
- Variables in ExecStart=: `${VAR}` is replaced inside its word; a word that is exactly `$VAR`
  becomes as many words as the value has (split at whitespace); `$$` is a literal `$`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from specd.errors import UsageError

_C_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\",
              '"': '"', "'": "'", "s": " "}


@dataclass(frozen=True)
class LogicalLine:
    line: int  # where it starts in the file, 1-based
    text: str


def read_unit_text(path: Path) -> str:
    """A unit file's text; a clear error for unreadable or non-UTF-8 files."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror}") from exc
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise UsageError(f"{path} line {line}: not UTF-8 (byte 0x{data[exc.start]:02x}); systemd reads unit files "
                         "as UTF-8: convert it (iconv -t UTF-8) and import again") from exc


def logical_lines(text: str) -> list[LogicalLine]:
    """Lines as systemd sees them: continuations joined, comments (also inside continuations) dropped."""
    result: list[LogicalLine] = []
    pending: list[str] | None = None
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if stripped.startswith(("#", ";")):
            continue
        if pending is None:
            if not stripped:
                continue
            pending, start = [], number
        if stripped.endswith("\\"):
            pending.append(stripped[:-1].rstrip())
            continue
        pending.append(stripped)
        result.append(LogicalLine(start, " ".join(part for part in pending).strip()))
        pending = None
    if pending is not None:
        result.append(LogicalLine(start, " ".join(pending).strip()))
    return result


def _c_escape(text: str, index: int, where: str) -> tuple[str, int]:
    """Decode the escape starting at text[index] == '\\'; returns (char, next index)."""
    if index + 1 >= len(text):
        raise UsageError(f"{where}: a lone backslash at the end of {text[:60]!r}")
    code = text[index + 1]
    if code in _C_ESCAPES:
        return _C_ESCAPES[code], index + 2
    if code == "x" and re.fullmatch(r"[0-9a-fA-F]{2}", text[index + 2:index + 4]):
        return chr(int(text[index + 2:index + 4], 16)), index + 4
    if code in "01234567" and re.fullmatch(r"[0-7]{3}", text[index + 1:index + 4]):
        return chr(int(text[index + 1:index + 4], 8)), index + 4
    if code == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[index + 2:index + 6]):
        return chr(int(text[index + 2:index + 6], 16)), index + 6
    if code == "U" and re.fullmatch(r"[0-9a-fA-F]{8}", text[index + 2:index + 10]):
        return chr(int(text[index + 2:index + 10], 16)), index + 10
    if code in " ;":
        return code, index + 2
    raise UsageError(f"{where}: unknown escape \\{code} in {text[:60]!r}")


def split_words(value: str, where: str) -> list[str]:
    """Split a value into words the way systemd splits ExecStart= and Environment=."""
    words: list[str] = []
    index, length = 0, len(value)
    while index < length:
        while index < length and value[index] in " \t":
            index += 1
        if index >= length:
            break
        word: list[str] = []
        quote: str | None = None
        while index < length:
            char = value[index]
            if char == "\\":
                decoded, index = _c_escape(value, index, where)
                word.append(decoded)
                continue
            if quote is not None:
                if char == quote:
                    quote = None
                else:
                    word.append(char)
                index += 1
                continue
            if char in "\"'":
                quote = char
                index += 1
                continue
            if char in " \t":
                break
            word.append(char)
            index += 1
        if quote is not None:
            raise UsageError(f"{where}: unbalanced {quote} quote in {value[:80]!r}")
        words.append("".join(word))
    return words


_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$\$")
_BARE = re.compile(r"^\$([A-Za-z_][A-Za-z0-9_]*)$")


def expand_variables(words: list[str], environment: dict[str, str]) -> list[str]:
    """ExecStart='s variable expansion: `${VAR}` in place, a lone `$VAR` word split at whitespace."""
    expanded: list[str] = []
    for word in words:
        bare = _BARE.match(word)
        if bare:
            expanded.extend(environment.get(bare.group(1), "").split())
            continue
        expanded.append(_VARIABLE.sub(lambda m: "$" if m.group(0) == "$$" else environment.get(m.group(1), ""),
                                      word))
    return expanded


def referenced_variables(words: list[str]) -> set[str]:
    names: set[str] = set()
    for word in words:
        bare = _BARE.match(word)
        if bare:
            names.add(bare.group(1))
        names.update(m.group(1) for m in _VARIABLE.finditer(word) if m.group(1))
    return names


def parse_assignments(value: str, where: str) -> dict[str, str]:
    """Environment='s `NAME=value` words (quoted as ExecStart= words are)."""
    result: dict[str, str] = {}
    for word in split_words(value, where):
        name, equals, env_value = word.partition("=")
        if not equals or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise UsageError(f"{where}: {word!r} is not a NAME=value assignment")
        result[name] = env_value
    return result


def parse_environment_file(text: str, where: str) -> dict[str, str]:
    """An EnvironmentFile=: NAME=value lines, # and ; comments, optional `export`, shell-style quotes."""
    result: dict[str, str] = {}
    for line in logical_lines(text):
        content = line.text.removeprefix("export ").strip()
        name, equals, raw = content.partition("=")
        name = name.strip()
        if not equals or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise UsageError(f"{where} line {line.line}: {content[:60]!r} is not NAME=value")
        raw = raw.strip()
        if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'":
            raw = raw[1:-1]
            if line.text.split("=", 1)[1].strip()[0] == '"':
                raw = re.sub(r'\\(["\\$`])', r"\1", raw)
        result[name] = raw
    return result
