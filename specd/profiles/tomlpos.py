"""Line numbers for keys in TOML text, so errors can say `file:line`.

tomlkit keeps comments but not positions; a small scan of the source finds where a key of a
table was written. Good enough for error messages; never used to parse values.
"""

from __future__ import annotations

import re

_HEADER = re.compile(r"^\s*\[\s*([^\]\[]+?)\s*\]\s*(#.*)?$")
_KEY = re.compile(r"""^\s*("[^"]*"|'[^']*'|[A-Za-z0-9_.-]+)\s*=""")


def key_line(text: str, table: str, key: str) -> int | None:
    """1-based line where `key` is assigned inside `[table]` ('' for the top level)."""
    current = ""
    for number, line in enumerate(text.splitlines(), start=1):
        header = _HEADER.match(line)
        if header:
            current = header.group(1).strip()
            continue
        match = _KEY.match(line)
        if match and current == table and match.group(1).strip("\"'") == key:
            return number
    return None


def table_line(text: str, table: str) -> int | None:
    for number, line in enumerate(text.splitlines(), start=1):
        header = _HEADER.match(line)
        if header and header.group(1).strip() == table:
            return number
    return None


def where(path: object, text: str, table: str, key: str | None) -> str:
    """'path line N' for messages; falls back to the table's line, then to the file alone."""
    line = key_line(text, table, key) if key is not None else None
    if line is None:
        line = table_line(text, table) if table else None
    return f"{path} line {line}" if line is not None else f"{path}"
