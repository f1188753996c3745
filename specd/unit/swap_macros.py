"""llama-swap's macros (internal/config/macros.go), and Go's formatting of the YAML values they stand for.

Macros are substituted in reverse declaration order, a model's own `macros:` overriding globals in
place and `${MODEL_ID}` first in the list (so last to be replaced); one pass, so a macro may only
use macros declared before it. A macro that is a whole string keeps its YAML type; inside a longer
string it is written as Go's `fmt` `%v` would write it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from decimal import Decimal
from typing import TypeAlias

from specd.errors import UsageError

Scalar: TypeAlias = "str | int | float | bool"
Value: TypeAlias = "Scalar | None | list[Value] | dict[str, Value]"
Macros = list[tuple[str, Scalar]]

_MACRO_NAME = re.compile(r"^[a-zA-Z0-9_-]+$")
MACRO_USE = re.compile(r"\$\{([a-zA-Z0-9_-]+)\}")
_RESERVED = ("PID", "PORT", "MODEL_ID")


def strings(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from strings(key)
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def macro_list(value: Value, where: str, context: str) -> Macros:
    if value is None:
        return []
    if not isinstance(value, dict):
        raise UsageError(f"{where}: {context} must be a mapping")
    out: Macros = []
    for name, item in value.items():
        name = str(name)
        problem = None
        if len(name) >= 64:
            problem = "exceeds maximum length of 63 characters"
        elif not _MACRO_NAME.match(name):
            problem = "contains invalid characters, must match ^[a-zA-Z0-9_-]+$"
        elif name in _RESERVED:
            problem = "is reserved"
        elif not isinstance(item, (str, int, float, bool)):
            problem = "must be a string, number or boolean"
        elif isinstance(item, str) and "${" + name + "}" in item:
            problem = "contains a self-reference"
        if problem is not None or not isinstance(item, (str, int, float, bool)):
            raise UsageError(f"{where}: {context}: macro '{name}' {problem}")
        out.append((name, item))
    return out


def go_str(value: Scalar) -> str:
    """Go's fmt %v of a YAML scalar, as llama-swap writes a macro value into a string."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _go_float(value)
    return str(value)


def _go_float(value: float) -> str:
    """strconv 'g' with shortest digits: exponent form below 1e-4 and from 1e6 on."""
    if math.isnan(value) or math.isinf(value):
        return "NaN" if math.isnan(value) else "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "0"
    shortest = Decimal(repr(abs(value))).normalize()
    digits = "".join(map(str, shortest.as_tuple().digits))
    exp = len(digits) - 1 + int(shortest.as_tuple().exponent)
    sign = "-" if value < 0 else ""
    if -4 <= exp < 6:
        return sign + format(shortest, "f")
    frac = "." + digits[1:] if len(digits) > 1 else ""
    return f"{sign}{digits[0]}{frac}e{'-' if exp < 0 else '+'}{abs(exp):02d}"


def substitute(value: Value, macros: Macros) -> Value:
    """substituteMacroList: each macro once, last declared first; a whole-string use keeps the type."""
    for name, macro in reversed(macros):
        value = _substitute_one(value, "${" + name + "}", macro)
    return value


def _substitute_one(value: Value, slug: str, macro: Scalar) -> Value:
    if isinstance(value, str):
        if value == slug:
            return macro
        return value.replace(slug, go_str(macro))
    if isinstance(value, dict):
        return {k: _substitute_one(v, slug, macro) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute_one(v, slug, macro) for v in value]
    return value


def merge(model_id: str, glob: Macros, local: Macros) -> Macros:
    """mergeModelMacros: MODEL_ID first, then globals; a model macro replaces a global in place."""
    merged: dict[str, Scalar] = dict([("MODEL_ID", model_id), *glob])
    merged.update(local)
    return list(merged.items())


def check_leftovers(settings: dict[str, Value], here: str, declared: list[str]) -> None:
    """validateMacroUses: nothing of the form ${name} may survive (except ${PID} in cmdStop)."""
    for key, value in settings.items():
        for text in strings(value):
            for name in MACRO_USE.findall(text):
                if name == "PID" and key == "cmdStop":
                    continue
                why = " (llama-swap expands macros once, last declared first: a macro may only use" \
                      " macros declared before it, and macros may not refer to each other in a cycle)"
                raise UsageError(f"{here}: {key}: unknown macro '${{{name}}}'" + (why if name in declared else ""))
