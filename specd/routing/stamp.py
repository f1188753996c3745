"""Per-request draft settings: one server, each class drafting as its profile would.

Where the engine honours per-request speculative fields (older llama.cpp builds and some forks
read `speculative.n_max`, `speculative.n_min`, `speculative.p_min` from the request body; the pinned
build has them compiled out, which `specd.routing.probe` finds), one server can serve every class
with its own draft settings instead of two servers with one each: the table's profile for a class
becomes the fields stamped on its requests. A profile that does not speculate becomes
`speculative.n_max = 0` (no drafting for that request). A field the client sent itself is never
replaced: the client's own settings always win.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from specd.routing.table import RoutingTable
from specd.traffic.taskclass import TASK_CLASSES, TaskClass

# profile [speculative] key -> the request field older llama-server builds read
FIELDS = {"draft_n_max": "speculative.n_max", "draft_n_min": "speculative.n_min", "draft_p_min": "speculative.p_min"}
PLAIN_TYPES = ("none", "")

Stamp = Mapping[str, int | float]


def stamp_of(speculative: Mapping[str, Any]) -> dict[str, int | float]:
    """The request fields that make one request draft as a profile with this [speculative] table does."""
    kind = str(speculative.get("type", "none") or "none")
    if kind in PLAIN_TYPES:
        return {"speculative.n_max": 0, "speculative.n_min": 0}
    return {field: speculative[key] for key, field in FIELDS.items()
            if isinstance(speculative.get(key), int | float) and not isinstance(speculative.get(key), bool)}


def stamps_for(table: RoutingTable, speculative_of: Mapping[str, Mapping[str, Any]],
               serving: str | None = None) -> dict[TaskClass, Stamp]:
    """Per class, the fields of its routed profile; a class routed to the `serving` profile needs none (the
    server runs its settings already), and a profile not in `speculative_of` stamps nothing."""
    found: dict[TaskClass, Stamp] = {}
    for task_class in TASK_CLASSES:
        profile = table.profile_for(task_class)
        if profile is not None and profile != serving and profile in speculative_of:
            fields = stamp_of(speculative_of[profile])
            if fields:
                found[task_class] = fields
    return found


def client_fields(body: Mapping[str, Any]) -> set[str]:
    """The speculative fields a client set itself: flat (`speculative.n_max`) or nested (`speculative: {n_max}`)."""
    own = {key for key in body if key.startswith("speculative.")}
    nested = body.get("speculative")
    if isinstance(nested, Mapping):
        own |= {f"speculative.{key}" for key in nested}
    return own


def stamp(body: Mapping[str, Any], fields: Stamp) -> dict[str, Any] | None:
    """The body with `fields` added where the client did not set them; None when nothing is added."""
    own = client_fields(body)
    added = {key: value for key, value in fields.items() if key not in own}
    if not added:
        return None
    return {**body, **added}


def stamped_bytes(body: Mapping[str, Any], fields: Stamp) -> bytes | None:
    """`stamp` serialised for the wire; None when the original bytes go as they are."""
    stamped = stamp(body, fields)
    return None if stamped is None else json.dumps(stamped, separators=(",", ":"), ensure_ascii=False).encode()
