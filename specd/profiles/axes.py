"""The axes of a parameter sweep: `draft_n_max=2..8`, `draft_p_min=0.5,0.75,0.9`.

One axis is a [speculative] key of a profile and the values to try. `specd tune --sweep` and the
nightly job's `[tuner] sweep` (specd.toml) read the same text with `parse_axis`; each value is
checked as the profile's own file would check it. The sweep itself is specd.tune.sweep.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from specd.errors import UsageError
from specd.profiles.keys import SPECULATIVE_KEYS, ProfileKey
from specd.profiles.schema import check_value

Value = int | float
MAX_RANGE = 64
SWEEPABLE: dict[str, ProfileKey] = {k.name: k for k in SPECULATIVE_KEYS
                                    if k.kind in (int, float) and not k.path and k.name != "draft_ngl"}
_RANGE = re.compile(r"(-?\d+)\.\.(-?\d+)")


@dataclass(frozen=True)
class Axis:
    """One --sweep: a [speculative] key and the values to try, in the order given."""

    key: str
    values: tuple[Value, ...]


def _bad(text: str, problem: str, hint: str | None = None) -> UsageError:
    return UsageError(f"--sweep {text}: {problem}", hint=hint)


def _number(text: str, key: ProfileKey, word: str) -> Value:
    try:
        value: Value = int(word) if key.kind is int else float(word)
    except ValueError:
        kind = "an integer" if key.kind is int else "a number"
        raise _bad(text, f"{key.name} takes {kind}; {word!r} is not one") from None
    problem = check_value(value, key.schema_key)
    if problem:
        raise _bad(text, f"{key.name} {problem}")
    return value


def parse_axis(text: str) -> Axis:
    """`key=a..b` (integers, both ends included) or `key=v1,v2,...`; the key must be a [speculative] one."""
    key_name, sep, spec = text.partition("=")
    key_name, spec = key_name.strip(), spec.strip()
    if not sep or not key_name or not spec:
        raise _bad(text, "expected KEY=A..B or KEY=V1,V2,...", hint="e.g. --sweep draft_n_max=2..8")
    key = SWEEPABLE.get(key_name)
    if key is None:
        known = ", ".join(sorted(SWEEPABLE))
        raise _bad(text, f"'{key_name}' is not a [speculative] key a sweep can vary", hint=f"sweepable: {known}")
    if ".." in spec and key.kind is not int:
        raise _bad(text, f"a range a..b is for integer keys; give {key.name} a list: {key.name}=0.5,0.75")
    span = _RANGE.fullmatch(spec)
    if span is not None:
        lo, hi = int(span.group(1)), int(span.group(2))
        if hi < lo or hi - lo >= MAX_RANGE:
            raise _bad(text, f"the range {lo}..{hi} must run upwards over at most {MAX_RANGE} values")
        words = [str(v) for v in range(lo, hi + 1)]
    else:
        words = [w.strip() for w in spec.split(",")]
        if any(not w for w in words):
            raise _bad(text, "an empty value in the list")
    values = tuple(dict.fromkeys(_number(text, key, w) for w in words))
    return Axis(key.name, values)


def axes_problem(value: Any) -> str | None:
    """The schema check of specd.toml's `[tuner] sweep`: a list of axes, each as `--sweep` takes it."""
    if not isinstance(value, list):
        return f"must be a list of KEY=A..B or KEY=V1,V2 strings, not {value!r}"
    keys: list[str] = []
    for item in value:
        if not isinstance(item, str):
            return f"must be a list of strings like \"draft_n_max=2..8\"; {item!r} is not one"
        try:
            keys.append(parse_axis(item).key)
        except UsageError as exc:
            return exc.message.removeprefix("--sweep ") + (f" ({exc.hint})" if exc.hint else "")
    if len(set(keys)) != len(keys):
        return f"names a key twice: {', '.join(keys)}"
    return None
