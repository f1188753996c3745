"""The shape of one request beyond its lengths: how it samples and which conversation it continues.

The tuner benches on traffic shaped like production's, and two facts of a request change what a
profile costs it: its sampling settings (speculation accepts fewer drafted tokens at temperature
0.8 than at 0) and whether it continues a conversation whose prefix the server may still hold
(prompt-cache reuse). The proxy records both per request without keeping content: the sampling
keys the client sent, and a short hash of the conversation's opening (the messages up to the
first user message), so the turns of one conversation share a key and nothing readable is kept.

A body is read with bounded work (`read_shape`): memory follows a JSON document's item count, not
its size (60 MB of small objects became 1.6 GB of Python objects), so a body over MAX_READ_BYTES or
over MAX_READ_ITEMS structural marks is never parsed; nor is one nested deeper than the parser
goes. Its shape is then unknown (`RequestShape.unknown` says why) and the request goes on as sent:
the proxy never refuses a body for its shape, llama-server judges it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specd.traffic.taskclass import TaskClass, task_class_of

# What a client may send to choose how tokens are drawn; the bench replays each as the client sent it.
SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p", "typical_p", "repeat_penalty", "presence_penalty",
                 "frequency_penalty", "mirostat", "mirostat_tau", "mirostat_eta", "dynatemp_range")
HASH_CHARS = 4096  # of each opening message: enough to tell conversations apart, bounded work per request
MAX_READ_BYTES = 8 * 1024 * 1024  # a bigger body is not parsed (its shape is unknown)
# ... nor one with more `{`, `[` and `,` bytes than this: an upper bound on its items (those inside
# strings count too), so on the Python objects json.loads would build (at most about 25 MB).
MAX_READ_ITEMS = 100_000


@dataclass(frozen=True)
class RequestShape:
    """What the traffic table keeps of a request besides its lengths (no content)."""

    sampling: str | None = None  # compact JSON of the SAMPLING_KEYS the client sent; None: it sent none
    conversation: str | None = None  # hash of the opening; None: no user message to anchor one
    turn: int = 1  # user messages so far: 1 opens a conversation, more continue it
    stream: bool = False  # the body asked for a stream ("stream": true)
    task_class: TaskClass | None = None  # of a chat body (specd.traffic.taskclass)
    unknown: str | None = None  # why the body's shape could not be read; None: read (or no body)

    @property
    def read(self) -> bool:
        """The body was read as a JSON object (its shape is known)."""
        return self.unknown is None


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
    return RequestShape(json.dumps(sampling, separators=(",", ":")) if sampling else None, conversation, turn,
                        stream=body.get("stream") is True,
                        task_class=task_class_of(messages) if isinstance(messages, list) else None)


def unread_because(body: bytes | bytearray) -> str | None:
    """Why `body` is not parsed at all (too big, too many items); None when it may be."""
    if len(body) > MAX_READ_BYTES:
        return f"body over {MAX_READ_BYTES} bytes"
    items = body.count(b"{") + body.count(b"[") + body.count(b",")
    if items > MAX_READ_ITEMS:
        return f"over {MAX_READ_ITEMS} JSON items"
    return None


def read_document(body: bytes | bytearray) -> dict[str, Any] | None:
    """The body as a JSON object, parsed within read_shape's bounds (routing reads it so); None when
    it is empty, past the bounds, nested too deep, or no JSON object."""
    if not body or unread_because(body) is not None:
        return None
    try:
        document = json.loads(body)
    except (RecursionError, ValueError, UnicodeDecodeError):
        return None
    return document if isinstance(document, dict) else None


def read_shape(body: bytes | bytearray) -> RequestShape:
    """The shape of a request body as a client sent it, with bounded work and memory: a body that
    cannot be read within the bounds (or is no JSON object) has an unknown shape, never an error."""
    if not body:
        return RequestShape()
    why = unread_because(body)
    if why is not None:
        return RequestShape(unknown=why)
    try:
        document = json.loads(body)
    except RecursionError:  # deeper than the parser goes: llama-server may still read it
        return RequestShape(unknown="nested too deep to read")
    except (ValueError, UnicodeDecodeError):
        return RequestShape(unknown="not JSON")
    if not isinstance(document, dict):
        return RequestShape(unknown="not a JSON object")
    try:
        return request_shape(document)
    except RecursionError:  # the conversation hash re-encodes a message: too deep for it
        return RequestShape(unknown="nested too deep to read")
    except (ValueError, TypeError) as exc:  # never seen; the row is written whatever the body was
        return RequestShape(unknown=f"unreadable: {type(exc).__name__}")
