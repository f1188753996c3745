"""Comparing two answers to the same prompt: tool-call schema, JSON shape, exact match, edit distance.

Pure. Speculative decoding at temperature 0 is not bit-for-bit lossless on prose (seed 002), yet
an agent stack must get the same tool calls: a *structured* probe (tool call, JSON answer,
one-token answer) passes when the structure matches; prose is only measured (exact match and
character-level edit distance), never failed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["tool", "json", "token", "prose"]
STRUCTURED: tuple[Kind, ...] = ("tool", "json", "token")


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # as the server sent it (a JSON string)


@dataclass(frozen=True)
class Answer:
    content: str
    tool_calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True)
class Check:
    probe: str
    kind: Kind
    exact: bool
    structured_ok: bool | None  # None for prose: measured, not judged
    distance: int  # character-level edit distance between the two contents
    similarity: float  # 1 - distance / longer length
    detail: str


def answer_of(payload: Mapping[str, Any]) -> Answer:
    """The first choice's text and tool calls; anything missing reads as empty."""
    choices = payload.get("choices")
    first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    raw = first.get("message")
    message: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
    text = message.get("content")
    content = text if isinstance(text, str) else ""
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            arguments = function.get("arguments")
            calls.append(ToolCall(str(function.get("name", "")),
                                  arguments if isinstance(arguments, str) else json.dumps(arguments)))
    return Answer(content, tuple(calls))


def json_shape(value: Any) -> Any:
    """The structure of a JSON value without its scalars: keys and types, lists by their element shapes."""
    if isinstance(value, dict):
        return {key: json_shape(item) for key, item in sorted(value.items())}
    if isinstance(value, list):
        return ["list", sorted({json.dumps(json_shape(item), sort_keys=True) for item in value})]
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return "null" if value is None else "string"


def _parsed(text: str) -> tuple[bool, Any]:
    try:
        return True, json.loads(text)
    except ValueError:
        return False, None


def tool_signature(call: ToolCall) -> tuple[str, tuple[str, ...], str]:
    """(name, argument keys, argument JSON shape): what must not change between profiles."""
    ok, arguments = _parsed(call.arguments)
    if not ok:
        return call.name, (), "unparsable arguments"
    keys = tuple(sorted(arguments)) if isinstance(arguments, dict) else ()
    return call.name, keys, json.dumps(json_shape(arguments), sort_keys=True)


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance over characters (two rows; prose answers are short)."""
    if len(a) < len(b):
        a, b = b, a
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, start=1):
        current = [i]
        for j, cb in enumerate(b, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def _structured(kind: Kind, reference: Answer, candidate: Answer) -> tuple[bool, str]:
    if kind == "tool":
        if not reference.tool_calls and not candidate.tool_calls:
            return True, "no tool calls produced by either profile"
        ref = [tool_signature(c) for c in reference.tool_calls]
        got = [tool_signature(c) for c in candidate.tool_calls]
        if ref == got:
            return True, f"{len(ref)} tool call(s) with the same names, argument keys and shapes"
        return False, f"tool calls differ: {ref} vs {got}"
    if kind == "json":
        (ref_ok, ref), (got_ok, got) = _parsed(reference.content), _parsed(candidate.content)
        if not ref_ok and not got_ok:
            return True, "neither answer is complete JSON"
        if ref_ok != got_ok:
            return False, "only one of the answers is valid JSON"
        same = json_shape(ref) == json_shape(got)
        return same, "same JSON shape" if same else "JSON shapes differ"
    same = reference.content.strip() == candidate.content.strip()
    return same, "same answer" if same else f"{reference.content.strip()!r} vs {candidate.content.strip()!r}"


def compare(probe: str, kind: Kind, reference: Answer, candidate: Answer) -> Check:
    exact = reference == candidate
    distance = edit_distance(reference.content, candidate.content)
    longer = max(len(reference.content), len(candidate.content))
    similarity = 1.0 - distance / longer if longer else 1.0
    if kind == "prose":
        detail = "identical" if exact else f"edit distance {distance} ({similarity:.0%} similar)"
        return Check(probe, kind, exact, None, distance, similarity, detail)
    ok, detail = _structured(kind, reference, candidate)
    return Check(probe, kind, exact, ok, distance, similarity, detail)
