"""The shape of one request beyond its lengths: how it samples and which conversation it continues.

The tuner benches on traffic shaped like production's, and two facts of a request change what a
profile costs it: its sampling settings (speculation accepts fewer drafted tokens at temperature
0.8 than at 0) and whether it continues a conversation whose prefix the server may still hold
(prompt-cache reuse). The proxy records both per request without keeping content: the sampling
keys the client sent, and a short hash of the conversation's opening (the messages up to the
first user message), so the turns of one conversation share a key and nothing readable is kept.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# What a client may send to choose how tokens are drawn; the bench replays each as the client sent it.
SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p", "typical_p", "repeat_penalty", "presence_penalty",
                 "frequency_penalty", "mirostat", "mirostat_tau", "mirostat_eta", "dynatemp_range")
HASH_CHARS = 4096  # of each opening message: enough to tell conversations apart, bounded work per request


@dataclass(frozen=True)
class RequestShape:
    """What the traffic table keeps of a request besides its lengths (no content)."""

    sampling: str | None = None  # compact JSON of the SAMPLING_KEYS the client sent; None: it sent none
    conversation: str | None = None  # hash of the opening; None: no user message to anchor one
    turn: int = 1  # user messages so far: 1 opens a conversation, more continue it


def sampling_of(body: Mapping[str, Any]) -> dict[str, float | int]:
    """The numeric sampling settings a body carries, in SAMPLING_KEYS order."""
    return {key: body[key] for key in SAMPLING_KEYS
            if isinstance(body.get(key), int | float) and not isinstance(body.get(key), bool)}


def _text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    text = content if isinstance(content, str) else json.dumps(content, sort_keys=True, default=str)
    return f"{message.get('role')}:{text[:HASH_CHARS]}"


def conversation_of(messages: Sequence[Any]) -> tuple[str | None, int]:
    """(hash of the opening up to the first user message, number of user messages); the hash is
    None (unknown) when the opening cannot be read back (a content nested deeper than json.dumps
    can recurse)."""
    dicts = [m for m in messages if isinstance(m, dict)]
    users = [i for i, m in enumerate(dicts) if m.get("role") == "user"]
    if not users:
        return None, 1
    try:
        opening = "\x1e".join(_text(m) for m in dicts[: users[0] + 1])
    except (RecursionError, ValueError, TypeError):
        return None, len(users)
    return hashlib.sha256(opening.encode("utf-8", "replace")).hexdigest()[:12], len(users)


def request_shape(body: Mapping[str, Any] | None) -> RequestShape:
    """The shape of a JSON request body (an empty shape for anything that is not a chat body)."""
    if body is None:
        return RequestShape()
    sampling = sampling_of(body)
    messages = body.get("messages")
    conversation, turn = conversation_of(messages) if isinstance(messages, list) else (None, 1)
    return RequestShape(json.dumps(sampling, separators=(",", ":")) if sampling else None, conversation, turn)
