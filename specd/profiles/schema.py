"""A tiny declarative checker for TOML tables: known keys, types, ranges, nearest-key hints.

Both specd.toml and profile files go through it, so every message has the same shape:
`<file> line N: key 'ctx_sise' is not known — did you mean 'ctx_size'?`
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specd.profiles.tomlpos import where

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

Check = Callable[[Any], str | None]


@dataclass(frozen=True)
class Key:
    kind: type | tuple[type, ...]
    check: Check | None = None
    doc: str = ""


@dataclass(frozen=True)
class Table:
    keys: Mapping[str, Key]
    tables: Mapping[str, Table] = field(default_factory=dict)
    free_form: Key | None = None  # e.g. [env]: any name, values of this kind


def kind_name(kind: type | tuple[type, ...]) -> str:
    names = {bool: "true/false", int: "an integer", float: "a number", str: "a string", list: "a list"}
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def _type_ok(value: Any, kind: type | tuple[type, ...]) -> bool:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool):
        return bool in kinds
    if float in kinds and isinstance(value, int):
        return True
    return isinstance(value, kinds)


def validate(data: Mapping[str, Any], schema: Table, *, path: Path, text: str, table: str = "") -> list[str]:
    """Every problem in `data`, sorted by line, each prefixed with file and line."""
    problems: list[tuple[int, str]] = []
    prefix = f"{table}." if table else ""
    for key, value in data.items():
        loc = where(path, text, table, key)
        line_no = int(loc.rsplit(" ", 1)[-1]) if " line " in loc else 0
        if key in schema.tables:
            if not isinstance(value, Mapping):
                problems.append((line_no, f"{loc}: '{prefix}{key}' must be a table ([{prefix}{key}])"))
                continue
            for sub in validate(value, schema.tables[key], path=path, text=text, table=f"{prefix}{key}"):
                problems.append((_line_of(sub), sub))
            continue
        spec = schema.keys.get(key, schema.free_form)
        if spec is None:
            known = list(schema.keys) + list(schema.tables)
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
            hint = f" — did you mean '{prefix}{close[0]}'?" if close else f" (known: {', '.join(sorted(known))})"
            problems.append((line_no, f"{loc}: key '{prefix}{key}' is not known{hint}"))
            continue
        message = check_value(value, spec)
        if message:
            problems.append((line_no, f"{loc}: '{prefix}{key}' {message}"))
    return [message for _, message in sorted(problems, key=lambda item: item[0])]


def _line_of(message: str) -> int:
    match = re.search(r" line (\d+):", message)
    return int(match.group(1)) if match else 0


def check_value(value: Any, spec: Key) -> str | None:
    if not _type_ok(value, spec.kind):
        return f"must be {kind_name(spec.kind)}, not {type(value).__name__} {value!r}"
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number, not {value!r}"
    strings = [value] if isinstance(value, str) else (
        [v for v in value if isinstance(v, str)] if isinstance(value, list) else [])
    for item in strings:
        if _CONTROL.search(item):
            return f"contains a control character (newline, tab, NUL...) in {item!r}; that could break the unit file"
    if spec.check is not None:
        return spec.check(value)
    return None


def in_range(lo: float | None = None, hi: float | None = None) -> Check:
    def check(value: Any) -> str | None:
        if lo is not None and value < lo:
            return f"must be >= {lo}, not {value}"
        if hi is not None and value > hi:
            return f"must be <= {hi}, not {value}"
        return None

    return check


def one_of(*choices: str) -> Check:
    def check(value: Any) -> str | None:
        if value in choices:
            return None
        close = difflib.get_close_matches(str(value), choices, n=1)
        hint = f" — did you mean '{close[0]}'?" if close else ""
        return f"must be one of {', '.join(choices)}, not {value!r}{hint}"

    return check


def list_of_strings(value: Any) -> str | None:
    for index, item in enumerate(value):
        if not isinstance(item, str):
            return f"must be a list of strings; item {index} is {type(item).__name__} {item!r}"
    return None


def matches(pattern: str, what: str) -> Check:
    compiled = re.compile(pattern)

    def check(value: Any) -> str | None:
        return None if compiled.fullmatch(value) else f"must be {what}, not {value!r}"

    return check
