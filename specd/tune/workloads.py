"""Workloads: the traffic a bench replays, as JSONL of OpenAI chat-completion bodies.

Seed 002's lesson is that the winner depends on the traffic (task class, prompt length, output
length, concurrency), so a bench never uses one prompt: it replays a workload, and a workload is
the one definition of "the traffic to bench on" whatever it came from: bodies the proxy captured
(specd.tune.recent), requests synthesized from the recorded shape (same module), a built-in set or
a user's file. One body per line, exactly what a client would POST (its sampling settings
included), plus an optional `specd` object that specd strips before sending:

- `task_class`: what kind of text it asks for (default: specd.traffic.taskclass guesses);
- `conversation`: turns sharing a name replay in order, each after the previous answer, so the
  prompt cache sees what production sees;
- `concurrency`: the requests in flight when it arrived, itself included: the replay sends it
  only once fewer than that many are in flight, in the order of the file;
- `arrival_s`: an open-loop schedule (not sent before this many seconds into its round);
- `recorded_at`: when the proxy saw it (unix time), for the time-of-day view.

`facts` states what a workload is (its source, size, class mix, concurrency, conversations,
sampling); bench, tune and the nightly run report exactly that.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from specd.errors import UsageError
from specd.traffic.shape import sampling_of
from specd.traffic.taskclass import TASK_CLASSES, TaskClass, classify
from specd.tune.periods import PERIODS, period_of

DATA_DIR = Path(__file__).resolve().parents[1] / "data" / "workloads"
STORED_WORKLOADS = ("code", "factual", "analysis", "creative", "repeat-input", "prose")
BUILTIN_WORKLOADS = (*STORED_WORKLOADS, "long-context", "multi-turn")
_META_KEYS = {"task_class", "arrival_s", "concurrency", "conversation", "recorded_at"}
Origin = Literal["captured", "synthetic", "builtin", "file"]
Arrival = Literal["closed-loop", "open-loop"]
CHARS_PER_TOKEN = 4

_FILLER = (
    "The archive ledger for the northern depot lists crates, pallets and seasonal stock counts. "
    "Entry {i}: the morning shipment arrived on time, the loading bay was swept, and the night "
    "shift logged {n} units of canvas, {m} coils of rope and a box of brass fittings. "
)
_QUESTIONS: dict[TaskClass, tuple[str, ...]] = {
    "code": ("Write a Python function that parses these ledger entries into a list of dicts.",
             "Implement a Rust struct and parser for the ledger entries above, with unit tests.",
             "Write a SQL query that totals the units per entry from a table built from the ledger."),
    "factual": ("What is the number of coils of rope in the last entry?",
                "Which entry lists the most units of canvas?",
                "How many entries does the ledger contain?"),
    "analysis": ("Analyse the ledger and explain why stock levels vary; compare the early and late entries.",
                 "Evaluate the trade-offs of keeping this ledger on paper versus a database.",
                 "Compare the canvas and rope counts and assess what the trend implies for the depot."),
    "creative": ("Write a short story about the night shift at this depot.",
                 "Compose a poem inspired by the brass fittings in the ledger.",
                 "Imagine the depot a hundred years from now and write a fable about it."),
    "edit": ("Rewrite the ledger below with its spelling fixed; keep everything else exactly as it is.",
             "Return the full ledger below with every count written in words; everything else unchanged.",
             "Copy the ledger below and correct any typos."),
}
# The classes the built-in long-context workload cycles through: questions about one long document.
DOCUMENT_CLASSES: tuple[TaskClass, ...] = ("code", "factual", "analysis", "creative")


@dataclass(frozen=True)
class WorkloadRequest:
    """One body to replay and the specd metadata that says how."""

    body: Mapping[str, Any]  # the OpenAI chat-completion body, without the `specd` key
    task_class: TaskClass
    arrival_s: float | None = None
    concurrency: int = 1
    conversation: str | None = None
    recorded_at: float | None = None

    @property
    def max_tokens(self) -> int:
        return int(self.body["max_tokens"])

    @property
    def prompt_tokens(self) -> int:
        """Rough prompt size (characters / 4), enough to bin requests by length before a run."""
        contents = [m.get("content") for m in self.body["messages"]]
        chars = sum(len(c) if isinstance(c, str) else len(json.dumps(c)) for c in contents)
        return max(1, chars // CHARS_PER_TOKEN)

    def to_json(self) -> dict[str, Any]:
        meta: dict[str, Any] = {"task_class": self.task_class}
        if self.arrival_s is not None:
            meta["arrival_s"] = self.arrival_s
        if self.concurrency != 1:
            meta["concurrency"] = self.concurrency
        if self.conversation is not None:
            meta["conversation"] = self.conversation
        if self.recorded_at is not None:
            meta["recorded_at"] = self.recorded_at
        return {**self.body, "specd": meta}


def typical_level(levels: Sequence[int]) -> int:
    """The concurrency a request typically meets (itself included): the median level, at least 1."""
    import numpy as np  # here, not at the top: `specd status` reads pins through this module

    return max(1, round(float(np.median(np.asarray(levels, dtype=np.float64))))) if levels else 1


def levels_by_period(samples: Sequence[tuple[float, int]]) -> dict[str, int]:
    """(unix time, concurrency level) pairs -> the typical level per local time of day, where traffic was seen."""
    by: dict[str, list[int]] = {}
    for ts, level in samples:
        by.setdefault(period_of(ts), []).append(level)
    return {name: typical_level(by[name]) for name, _, _ in PERIODS if name in by}


def period_note(levels: Mapping[str, int]) -> str | None:
    """A sentence when traffic differs by time of day enough (2x) that one profile may not suit all of it."""
    if len(levels) < 2 or max(levels.values()) < 2 * min(levels.values()):
        return None
    shown = ", ".join(f"{name} {level}" for name, level in levels.items())
    busiest = max(levels, key=lambda k: levels[k])
    return (f"traffic differs by time of day (typical concurrency: {shown}); speculation that wins one stream "
            f"at a time may lose in the {busiest}: tune each period with --period NAME, or compare the levels "
            "with `specd tune-levels`")


@dataclass(frozen=True)
class TrafficFacts:
    """What a workload is, as bench, tune and the nightly history report it."""

    name: str
    source: Origin
    path: str | None
    size: int
    class_mix: dict[str, int]
    concurrency: int  # the typical level a request is replayed at (itself included)
    concurrency_levels: dict[str, int]  # level -> requests
    concurrency_by_period: dict[str, int]  # local time of day -> typical level, where recorded
    arrival: Arrival
    conversations: int  # conversations of more than one turn
    follow_ups: int  # requests that continue one of them (the prompt-cache reuse production sees)
    sampling: dict[str, int]  # the sampling settings sent ("server defaults" when none) -> requests

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _sampling_label(body: Mapping[str, Any]) -> str:
    settings = sampling_of(body)
    return ",".join(f"{k}={v:g}" for k, v in settings.items()) if settings else "server defaults"


@dataclass(frozen=True)
class Workload:
    name: str
    requests: tuple[WorkloadRequest, ...]
    source: Path | None = field(default=None, compare=False)
    origin: Origin = field(default="file", compare=False)

    @property
    def concurrency(self) -> int:
        """The typical level a request is replayed at (each request itself keeps its own)."""
        return typical_level([r.concurrency for r in self.requests])

    @property
    def follow_ups(self) -> int:
        """Requests that continue a conversation an earlier request opened."""
        seen: set[str] = set()
        count = 0
        for request in self.requests:
            if request.conversation is not None:
                count += request.conversation in seen
                seen.add(request.conversation)
        return count

    def facts(self) -> TrafficFacts:
        turns = Counter(r.conversation for r in self.requests if r.conversation is not None)
        arrival: Arrival = "open-loop" if self.has_arrivals else "closed-loop"
        return TrafficFacts(
            name=self.name, source=self.origin, path=None if self.source is None else str(self.source),
            size=len(self.requests), class_mix=dict(Counter(r.task_class for r in self.requests)),
            concurrency=self.concurrency,
            concurrency_levels={str(k): v for k, v in sorted(Counter(r.concurrency for r in self.requests).items())},
            concurrency_by_period=levels_by_period([(r.recorded_at, r.concurrency) for r in self.requests
                                                    if r.recorded_at is not None]),
            arrival=arrival, conversations=sum(1 for t in turns.values() if t > 1), follow_ups=self.follow_ups,
            sampling=dict(Counter(_sampling_label(r.body) for r in self.requests).most_common()))

    @property
    def has_arrivals(self) -> bool:
        """Every request carries an arrival time: replay them open-loop, on that schedule."""
        return bool(self.requests) and all(r.arrival_s is not None for r in self.requests)

    def at_concurrency(self, level: int) -> Workload:
        """The same requests, replayed `level` at a time."""
        return Workload(self.name, tuple(replace(r, concurrency=level, arrival_s=None) for r in self.requests),
                        self.source, self.origin)


def _line_error(path: Path, line: int, problem: str) -> UsageError:
    return UsageError(f"{path} line {line}: {problem}",
                      hint="each line is one JSON chat-completion body with 'messages' and 'max_tokens'")


def parse_line(text: str, path: Path, line: int) -> WorkloadRequest:  # noqa: C901 - predates the complexity gate; split when next changed
    """Validate one JSONL line; every problem names the file and line."""
    try:
        body = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _line_error(path, line, f"not valid JSON ({exc.msg} at column {exc.colno})") from exc
    if not isinstance(body, dict):
        raise _line_error(path, line, "expected a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _line_error(path, line, "'messages' must be a non-empty list")
    for index, message in enumerate(messages):
        if not (isinstance(message, dict) and isinstance(message.get("role"), str) and "content" in message):
            raise _line_error(path, line, f"messages[{index}] needs a string 'role' and a 'content'")
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise _line_error(path, line,
                          "'max_tokens' must be a positive integer (a bench needs a fixed output length)")
    meta = body.pop("specd", {})
    if not isinstance(meta, dict):
        raise _line_error(path, line, "'specd' must be an object")
    unknown = sorted(set(meta) - _META_KEYS)
    if unknown:
        known = ", ".join(sorted(_META_KEYS))
        raise _line_error(path, line, f"unknown specd key {unknown[0]!r} (known: {known})")
    task_class = meta.get("task_class", classify(messages))
    if task_class not in TASK_CLASSES:
        raise _line_error(path, line, f"task_class {task_class!r} is not one of {', '.join(TASK_CLASSES)}")
    arrival = meta.get("arrival_s")
    bad_arrival = isinstance(arrival, bool) or not isinstance(arrival, (int, float)) or arrival < 0
    if arrival is not None and bad_arrival:
        raise _line_error(path, line, "specd.arrival_s must be a number of seconds >= 0")
    concurrency = meta.get("concurrency", 1)
    if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
        raise _line_error(path, line, "specd.concurrency must be an integer >= 1")
    conversation = meta.get("conversation")
    if conversation is not None and not isinstance(conversation, str):
        raise _line_error(path, line, "specd.conversation must be a string")
    recorded = meta.get("recorded_at")
    if recorded is not None and (isinstance(recorded, bool) or not isinstance(recorded, (int, float))):
        raise _line_error(path, line, "specd.recorded_at must be a unix time")
    return WorkloadRequest(body=body, task_class=task_class,
                           arrival_s=None if arrival is None else float(arrival),
                           concurrency=concurrency, conversation=conversation,
                           recorded_at=None if recorded is None else float(recorded))


def read_workload(path: Path, name: str | None = None, origin: Origin = "file") -> Workload:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{path}: cannot read workload: {exc.strerror or exc}") from exc
    requests = tuple(parse_line(raw, path, number) for number, raw in enumerate(text.splitlines(), start=1)
                     if raw.strip())
    if not requests:
        raise UsageError(f"{path}: the workload has no requests")
    return Workload(name=name or path.stem, requests=requests, source=path, origin=origin)


def load_workload(name_or_path: str | Path) -> Workload:
    """A built-in name (code, factual, ..., long-context) or a path to a JSONL file."""
    key = str(name_or_path)
    if key in GENERATED:
        return GENERATED[key]()
    if key in STORED_WORKLOADS:
        return read_workload(DATA_DIR / f"{key}.jsonl", key, "builtin")
    path = Path(name_or_path).expanduser()
    if not path.exists():
        raise UsageError(f"no workload named {key!r} and no such file",
                         hint=f"built-in workloads: {', '.join(BUILTIN_WORKLOADS)}")
    return read_workload(path)


def save_workload(workload: Workload | Sequence[WorkloadRequest], path: Path) -> None:
    """Write JSONL atomically, metadata under `specd`, so load_workload reads back the same workload."""
    requests = workload.requests if isinstance(workload, Workload) else tuple(workload)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    lines = (json.dumps(r.to_json(), ensure_ascii=False) + "\n" for r in requests)
    tmp.write_text("".join(lines), encoding="utf-8")
    os.replace(tmp, path)


def filler_text(tokens: int, seed: int) -> str:
    """Neutral context of about `tokens` tokens: no words the task classifier reacts to."""
    import numpy as np

    rng = np.random.default_rng(seed)
    parts: list[str] = []
    size = 0
    index = 0
    while size < tokens * CHARS_PER_TOKEN:
        index += 1
        part = _FILLER.format(i=index, n=int(rng.integers(10, 999)), m=int(rng.integers(1, 99)))
        parts.append(part)
        size += len(part)
    return "".join(parts)[: tokens * CHARS_PER_TOKEN]


def question(task_class: TaskClass, index: int) -> str:
    """A question of the class about the filler ledger (the classifier puts it in that class)."""
    return _QUESTIONS[task_class][index % len(_QUESTIONS[task_class])]


def opening(task_class: TaskClass, prompt_tokens: int, seed: int, question_index: int) -> list[dict[str, str]]:
    """A reference context then a question of the class: about `prompt_tokens` tokens in all. An edit
    carries its body in the user's message (the text to give back changed), as edit requests do."""
    asked = question(task_class, question_index)
    context = filler_text(max(prompt_tokens - len(asked) // CHARS_PER_TOKEN, 1), seed)
    if task_class == "edit":
        return [{"role": "user", "content": f"{asked}\n\n{context}"}]
    return [{"role": "system", "content": f"Reference material:\n{context}"}, {"role": "user", "content": asked}]


def ask(task_class: TaskClass, prompt_tokens: int, max_tokens: int, seed: int, question_index: int,
        conversation: str | None = None) -> WorkloadRequest:
    body = {"messages": opening(task_class, prompt_tokens, seed, question_index), "max_tokens": max_tokens}
    return WorkloadRequest(body=body, task_class=task_class, conversation=conversation)


def long_context(n: int = 12, seed: int = 0) -> Workload:
    """Agent-shaped traffic (seed 002: ~43K-token prompts): 4K-43K-token contexts, each its own document."""
    lengths = (4096, 8192, 16384, 32768, 43000)
    outputs = (64, 256, 1024)
    requests = tuple(
        ask(DOCUMENT_CLASSES[i % len(DOCUMENT_CLASSES)], lengths[i % len(lengths)], outputs[i % len(outputs)],
            seed * 1000 + i, i // len(DOCUMENT_CLASSES), conversation=f"long-context-{i}")
        for i in range(n)
    )
    return Workload(name="long-context", requests=requests, origin="builtin")


_TURNS = ("Summarise the ledger in two sentences.", "Which entry has the most rope?",
          "List three entries with their canvas counts.", "What should the night shift check first?")


def multi_turn(conversations: int = 4, turns: int = 3, context_tokens: int = 400, max_tokens: int = 48,
               seed: int = 0) -> Workload:
    """Chat traffic: each conversation keeps its reference context and grows turn by turn (prompt-cache reuse).

    Recorded assistant turns are placeholders; replay puts the server's own answers in their place.
    """
    requests: list[WorkloadRequest] = []
    for c in range(conversations):
        messages: list[dict[str, str]] = [
            {"role": "system", "content": f"Reference material:\n{filler_text(context_tokens, seed * 1000 + c)}"}]
        for t in range(turns):
            messages.append({"role": "user", "content": _TURNS[(c + t) % len(_TURNS)]})
            sent = [dict(m) for m in messages]
            requests.append(WorkloadRequest(body={"messages": sent, "max_tokens": max_tokens},
                                            task_class=classify(sent), conversation=f"chat-{c}"))
            messages.append({"role": "assistant", "content": f"(answer {c}.{t})"})
    return Workload(name="multi-turn", requests=tuple(requests), origin="builtin")


GENERATED: dict[str, Callable[[], Workload]] = {"long-context": long_context, "multi-turn": multi_turn}
