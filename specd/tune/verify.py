"""`specd verify`: does a profile answer like the reference, on structured and free-form prompts?

Both profiles get the same probes at temperature 0 with a fixed seed and no prompt cache: built-in
tool calls (an OpenAI `tools` array), JSON answers (a response schema), one-token answers and
prose, plus up to `MAX_TRAFFIC_PROBES` tool-call bodies from this box's own captured traffic. The
structured checks (specd.tune.fidelity) gate the tuner: it never switches to a profile whose last
verification, on the profile as it is now, failed them; `specd switch` warns about a profile that
was never verified. Results live in the state DB, keyed by unit, profile and a fingerprint of the
resolved profile, so an edited profile counts as unverified again.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from specd import store
from specd.errors import UsageError
from specd.profiles.config import Deployment
from specd.profiles.load import list_profiles, load_profile
from specd.tune.fidelity import STRUCTURED, Check, Kind, answer_of, compare
from specd.tune.targets import Target

SEED = 42
MAX_TRAFFIC_PROBES = 8
TRAFFIC_MAX_TOKENS = 128
REFERENCE = "autoregressive"
SCHEMA = """
CREATE TABLE IF NOT EXISTS verifications (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    unit TEXT NOT NULL,
    profile TEXT NOT NULL,
    against TEXT NOT NULL,
    at REAL NOT NULL,
    fingerprint TEXT NOT NULL,
    structured_ok INTEGER NOT NULL,
    summary TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS verifications_profile ON verifications(unit, profile, at);
"""


@dataclass(frozen=True)
class Probe:
    name: str
    kind: Kind
    body: Mapping[str, Any]


def _user(text: str, max_tokens: int, **extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}], "max_tokens": max_tokens, **extra}


def _tool(name: str, description: str, properties: Mapping[str, Any], required: Sequence[str]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": dict(properties), "required": list(required)}}}


_WEATHER = _tool("get_weather", "Current weather for a city",
                 {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}}, ["city"])
_SEARCH = _tool("search_files", "Search the repository for a pattern",
                {"pattern": {"type": "string"}, "max_results": {"type": "integer"}}, ["pattern"])
_PERSON = {"type": "json_schema", "json_schema": {"name": "person", "schema": {
    "type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"]}}}

BUILTIN_PROBES: tuple[Probe, ...] = (
    Probe("tool-weather", "tool", _user("What is the weather in Paris right now?", 64, tools=[_WEATHER])),
    Probe("tool-search", "tool", _user("Find every TODO in the repository, at most 5 results.", 64,
                                       tools=[_SEARCH, _WEATHER])),
    Probe("json-person", "json", _user("Describe Ada Lovelace as JSON with her name and age at death.", 48,
                                       response_format=_PERSON)),
    Probe("json-object", "json", _user("Give the capital of France as a JSON object with a key 'capital'.", 32,
                                       response_format={"type": "json_object"})),
    Probe("token-yes-no", "token", _user("Is water wet? Answer yes or no.", 1)),
    Probe("token-digit", "token", _user("What is 2 + 2? Answer with one digit.", 1)),
    Probe("prose-story", "prose", _user("Write a short story about a lighthouse keeper.", 48)),
    Probe("prose-explain", "prose", _user("Explain why the sky is blue.", 48)),
    Probe("prose-code", "prose", _user("Write a Python function that reverses a string.", 48)),
)


def traffic_probes(bodies: Sequence[Mapping[str, Any]], limit: int = MAX_TRAFFIC_PROBES) -> list[Probe]:
    """Captured request bodies that carry a `tools` array, as tool probes (the most recent `limit`)."""
    probes = []
    for number, body in enumerate(bodies):
        if isinstance(body.get("tools"), list) and body["tools"] and isinstance(body.get("messages"), list):
            capped = min(int(body.get("max_tokens") or body.get("max_completion_tokens") or TRAFFIC_MAX_TOKENS),
                         TRAFFIC_MAX_TOKENS)
            kept = {k: v for k, v in body.items() if k in ("messages", "tools", "tool_choice", "response_format")}
            probes.append(Probe(f"traffic-{number}", "tool", {**kept, "max_tokens": capped}))
    return probes[-limit:]


@dataclass
class Verification:
    profile: str
    against: str
    checks: list[Check] = field(default_factory=list)
    at: float = 0.0
    notes: list[str] = field(default_factory=list)
    drafted: dict[str, int] = field(default_factory=dict)  # tokens drafted over the probes, per profile
    draft_problems: list[str] = field(default_factory=list)  # a type = "none" profile whose server drafted

    @property
    def structured_ok(self) -> bool:
        return not self.draft_problems and all(c.structured_ok is not False for c in self.checks)

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.structured_ok is False]

    def exact_rate(self, kinds: Sequence[Kind] = ("tool", "json", "token", "prose")) -> float | None:
        chosen = [c for c in self.checks if c.kind in kinds]
        return sum(c.exact for c in chosen) / len(chosen) if chosen else None

    def tool_calls_produced(self) -> bool:
        return any(c.kind == "tool" and not c.detail.startswith("no tool calls") for c in self.checks)

    def summary(self) -> str:
        prose = [c for c in self.checks if c.kind == "prose"]
        distances = ", ".join(str(c.distance) for c in prose)
        verdict = "passes" if self.structured_ok else f"FAILS {len(self.failures)} structured check(s)"
        if self.draft_problems:
            verdict = "FAILS: " + "; ".join(self.draft_problems)
        tools = "" if self.tool_calls_produced() else "; no tool calls produced"
        if not self.checks:  # a plain profile checked alone: only its drafts were looked at
            return f"{self.profile}: {verdict if self.draft_problems else 'no drafts: it decodes autoregressively'}"
        return (f"{self.profile} vs {self.against}: {verdict}; exact match {self.exact_rate() or 0.0:.0%} "
                f"(structured {self.exact_rate(STRUCTURED) or 0.0:.0%}); prose edit distance [{distances}]{tools}")

    def as_json(self) -> dict[str, Any]:
        return {"profile": self.profile, "against": self.against, "at": self.at,
                "structured_ok": self.structured_ok, "exact_rate": self.exact_rate(),
                "structured_exact_rate": self.exact_rate(STRUCTURED),
                "tool_calls_produced": self.tool_calls_produced(), "summary": self.summary(),
                "notes": self.notes, "drafted": self.drafted, "draft_problems": self.draft_problems,
                "checks": [asdict(c) for c in self.checks]}


def probe_body(probe: Probe, seed: int = SEED) -> dict[str, Any]:
    return {**probe.body, "temperature": 0, "seed": seed, "stream": False, "cache_prompt": False}


def collect(target: Target, profile: str, probes: Sequence[Probe], seed: int = SEED) -> list[Mapping[str, Any]]:
    target.activate(profile)
    return [target.complete(probe_body(probe, seed)).payload for probe in probes]


def drafted_tokens(payloads: Sequence[Mapping[str, Any]]) -> int:
    """Tokens drafted over these answers: `timings.draft_n`, absent (as llama-server leaves it) = 0."""
    total = 0
    for payload in payloads:
        timings = payload.get("timings")
        drafted = timings.get("draft_n") if isinstance(timings, Mapping) else None
        total += drafted if isinstance(drafted, int) and not isinstance(drafted, bool) else 0
    return total


def _no_drafts(result: Verification, name: str, payloads: Sequence[Mapping[str, Any]]) -> None:
    result.drafted[name] = drafted = drafted_tokens(payloads)
    if drafted:
        result.draft_problems.append(f'{name} has type = "none" but its server drafted {drafted} tokens over '
                                     f"{len(payloads)} probes (the binary speculates by default?)")


def verify_profiles(target: Target, profile: str, against: str, probes: Sequence[Probe] = BUILTIN_PROBES,
                    seed: int = SEED, plain: Collection[str] = ()) -> Verification:
    """Run every probe on `against` then on `profile` (ending there) and compare the answers; a profile
    named in `plain` (type = "none") must also draft nothing."""
    if profile == against:
        raise UsageError(f"{profile} cannot be verified against itself", hint="pass --against REFERENCE")
    reference = collect(target, against, probes, seed)
    candidate = collect(target, profile, probes, seed)
    result = Verification(profile, against, at=time.time())
    for name, payloads in ((against, reference), (profile, candidate)):
        if name in plain:
            _no_drafts(result, name, payloads)
        else:
            result.drafted[name] = drafted_tokens(payloads)
    for probe, ref, got in zip(probes, reference, candidate, strict=True):
        result.checks.append(compare(probe.name, probe.kind, answer_of(ref), answer_of(got)))
    if not any(p.name.startswith("traffic-") for p in probes):
        result.notes.append("no tool-call traffic captured on this box: built-in probes only")
    return result


def verify_plain(target: Target, profile: str, probes: Sequence[Probe] = BUILTIN_PROBES,
                 seed: int = SEED) -> Verification:
    """A type = "none" profile that is its own reference: the one thing to check is that it drafts nothing."""
    result = Verification(profile, profile, at=time.time())
    _no_drafts(result, profile, collect(target, profile, probes, seed))
    return result


# -- the profiles, the state DB and the gate ------------------------------------------------------------


def needs_verification(deployment: Deployment, profile: str) -> bool:
    """A profile that speculates; plain decoding is the reference itself."""
    return load_profile(deployment.profiles_dir, profile).speculative.type != "none"


def reference_profile(deployment: Deployment) -> str | None:
    """`autoregressive` when it exists, else the first valid profile that does not speculate."""
    names = [p.name for p in list_profiles(deployment.profiles_dir) if not p.abstract and p.error is None]
    if REFERENCE in names:
        return REFERENCE
    return next((n for n in names if not needs_verification(deployment, n)), None)


def fingerprint(deployment: Deployment, profile: str, *, named: bool = True) -> str:
    """What a verification holds for: the resolved profile (its name too, unless `named` is False)."""
    loaded = asdict(load_profile(deployment.profiles_dir, profile))
    left_out = ("path", "description", "inherits_chain") if named else ("path", "description", "inherits_chain", "name")
    kept = {k: v for k, v in loaded.items() if k not in left_out}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:16]


def carry_verification(deployment: Deployment, source: str, target: str) -> bool:
    """A sweep's winning variant, written under its lasting name, keeps the verification its temporary
    file earned — only when the two resolve to the same settings (names and descriptions aside)."""
    stored = _last_row(deployment, source)
    if stored is None or stored["fingerprint"] != fingerprint(deployment, source):
        return False
    if fingerprint(deployment, source, named=False) != fingerprint(deployment, target, named=False):
        return False
    summary = {**json.loads(stored["summary"]), "carried_from": source}
    conn = store.connect()
    try:
        conn.execute("INSERT INTO verifications (unit, profile, against, at, fingerprint, structured_ok, summary) "
                     "VALUES (?,?,?,?,?,?,?)",
                     (deployment.unit, target, stored["against"], stored["at"], fingerprint(deployment, target),
                      stored["structured_ok"], json.dumps(summary)))
    finally:
        conn.close()
    return True


def save_verification(deployment: Deployment, result: Verification) -> None:
    conn = store.connect()
    try:
        store.ensure_schema(conn, SCHEMA)
        conn.execute("INSERT INTO verifications (unit, profile, against, at, fingerprint, structured_ok, summary) "
                     "VALUES (?,?,?,?,?,?,?)",
                     (deployment.unit, result.profile, result.against, result.at or time.time(),
                      fingerprint(deployment, result.profile), int(result.structured_ok),
                      json.dumps({k: v for k, v in result.as_json().items() if k != "checks"})))
    finally:
        conn.close()


@dataclass(frozen=True)
class Stored:
    profile: str
    against: str
    at: float
    current: bool  # the profile has not changed since
    structured_ok: bool
    summary: str


def _last_row(deployment: Deployment, profile: str) -> Any:
    conn = store.connect()
    try:
        store.ensure_schema(conn, SCHEMA)
        return conn.execute("SELECT * FROM verifications WHERE unit=? AND profile=? ORDER BY at DESC, id DESC LIMIT 1",
                            (deployment.unit, profile)).fetchone()
    finally:
        conn.close()


def last_verification(deployment: Deployment, profile: str) -> Stored | None:
    row = _last_row(deployment, profile)
    if row is None:
        return None
    return Stored(profile, row["against"], row["at"], row["fingerprint"] == fingerprint(deployment, profile),
                  bool(row["structured_ok"]), str(json.loads(row["summary"]).get("summary", "")))


def unverified_warning(deployment: Deployment, profile: str) -> str | None:
    """What `specd switch` should say before switching to a profile whose fidelity is unknown or failed."""
    if not needs_verification(deployment, profile):
        return None
    stored = last_verification(deployment, profile)
    if stored is None:
        return f"{profile} has never been verified on this box: run `specd verify {profile}`"
    if not stored.current:
        return f"{profile} changed since it was verified: run `specd verify {profile}` again"
    if not stored.structured_ok:
        return f"{profile} failed its last verification: {stored.summary}"
    return None


Guard = Callable[[str], str | None]


def tuner_guard(deployment: Deployment, target: Target, bodies: Sequence[Mapping[str, Any]]) -> Guard:
    """For the tuner: the reason not to switch to a profile (None: go ahead); verifies it first when needed."""

    def guard(profile: str) -> str | None:
        if not needs_verification(deployment, profile):
            return None
        stored = last_verification(deployment, profile)
        if stored is None or not stored.current:
            against = reference_profile(deployment)
            if against is None:
                return None
            plain = [name for name in (against,) if not needs_verification(deployment, name)]
            result = verify_profiles(target, profile, against, (*BUILTIN_PROBES, *traffic_probes(bodies)),
                                     plain=plain)
            save_verification(deployment, result)
            return None if result.structured_ok else f"{profile} fails the fidelity checks ({result.summary()})"
        return None if stored.structured_ok else f"{profile} failed its last verification ({stored.summary})"

    return guard
