"""What the night's end-to-end tests (and benchmarks/night.py) share: a traffic generator that sends a
known mix at a known concurrency through the proxy, the `[tuner]` table that makes the daemon's own
scheduler fire the nightly run at a chosen second, and reading the run's history event back."""

from __future__ import annotations

import json
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import httpx

from specd import paths
from specd.deploy.history import History
from specd.deploy.status import TUNING_EVENTS
from specd.traffic.taskclass import classify


@dataclass(frozen=True)
class Conversation:
    """User turns sent one after another, each with the answers so far in its history."""

    asks: tuple[str, ...]
    max_tokens: int
    sampling: tuple[tuple[str, float], ...] = ()
    system: str | None = None

    def opening(self) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.system}] if self.system else []


@dataclass
class Sent:
    """What the clients saw."""

    statuses: list[int] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    latencies_s: list[float] = field(default_factory=list)
    started_at: float = 0.0
    ended_at: float = 0.0


SAMPLING = (("temperature", 0.7), ("top_p", 0.9))


def tiny_mix() -> list[Conversation]:
    """14 requests: code, factual and creative asks and one two-turn conversation, sampled at 0.7 / 0.9."""
    code = [f"Write a Python function that {what}." for what in (
        "reverses a list", "adds two numbers", "counts vowels", "checks for a palindrome", "sums a list",
        "returns the maximum")]
    factual = ["What is the capital of France?", "What is the boiling point of water?", "Who wrote Hamlet?"]
    creative = ["Write a short poem about the sea.", "Write a short story about a cat.", "Write a haiku about rain."]
    single = [Conversation((ask,), 24, SAMPLING) for ask in (*code, *factual, *creative)]
    return [*single, Conversation(("What is the largest planet?", "And the smallest one?"), 24, SAMPLING,
                                  system="Answer in one sentence.")]


def expected_mix(conversations: list[Conversation]) -> Counter[str]:
    """The task class of every request the mix sends, as the proxy's classifier sees it."""
    mix: Counter[str] = Counter()
    for conversation in conversations:
        messages = conversation.opening()
        for ask in conversation.asks:
            messages = [*messages, {"role": "user", "content": ask}]
            mix[classify(messages)] += 1
            messages = [*messages, {"role": "assistant", "content": "..."}]
    return mix


def send_mix(url: str, conversations: list[Conversation], concurrency: int, *, model: str = "tiny",
             timeout_s: float = 300.0, stream_every: int = 0) -> Sent:
    """`concurrency` clients in a closed loop, each taking the next conversation and sending its turns in order.

    `stream_every`: every Nth request streams (0: none). A failure is any non-200 answer, a transport
    error, a body that is not a completion, or a stream that does not end with [DONE].
    """
    todo: queue.Queue[Conversation] = queue.Queue()
    for conversation in conversations:
        todo.put(conversation)
    sent = Sent(started_at=time.time())
    lock = threading.Lock()
    counter = [0]

    def client() -> None:
        with httpx.Client(timeout=timeout_s) as http:
            while True:
                try:
                    conversation = todo.get_nowait()
                except queue.Empty:
                    return
                messages = conversation.opening()
                for ask in conversation.asks:
                    messages = [*messages, {"role": "user", "content": ask}]
                    with lock:
                        counter[0] += 1
                        stream = bool(stream_every) and counter[0] % stream_every == 0
                    body = {"model": model, "messages": messages, "max_tokens": conversation.max_tokens,
                            "stream": stream, **dict(conversation.sampling)}
                    status, answer, problem, took = _post(http, url, body)
                    with lock:
                        sent.statuses.append(status)
                        sent.latencies_s.append(took)
                        if problem:
                            sent.failures.append(problem)
                    messages = [*messages, {"role": "assistant", "content": answer}]

    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    sent.ended_at = time.time()
    return sent


def _post(http: httpx.Client, url: str, body: dict[str, Any]) -> tuple[int, str, str | None, float]:
    started = time.monotonic()
    try:
        if body["stream"]:
            with http.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
                text = "".join(response.iter_text())
            status = response.status_code
            pieces = [json.loads(line[6:]) for line in text.split("\n\n")
                      if line.startswith("data: {")]
            answer = "".join(str((p.get("choices") or [{}])[0].get("delta", {}).get("content") or "") for p in pieces)
            ok = status == 200 and text.rstrip().endswith("data: [DONE]") and not any("error" in p for p in pieces)
        else:
            response = http.post(f"{url}/v1/chat/completions", json=body)
            status = response.status_code
            answer = str(response.json()["choices"][0]["message"]["content"]) if status == 200 else ""
            ok = status == 200
    except (httpx.HTTPError, ValueError, KeyError, IndexError) as exc:
        return 0, "", f"{type(exc).__name__}: {exc}", time.monotonic() - started
    took = time.monotonic() - started
    return status, answer, None if ok else f"status {status}: {text if body['stream'] else response.text}"[:300], took


def cron_in(seconds: float) -> tuple[str, float]:
    """A six-field `[tuner] cron` firing once, `seconds` from now (local time, as the daemon's scheduler reads it)."""
    at = (datetime.now().astimezone() + timedelta(seconds=seconds)).replace(microsecond=0)
    return f"{at.second} {at.minute} {at.hour} * * *", at.timestamp()


def tuner_table(cron: str, *, idle_s: float, budget_minutes: float, n: int, candidates: list[str]) -> str:
    """A [tuner] table; the sample cap is 4 x n (max_n): a night on the tiny model takes minutes whatever it finds."""
    return (f'enabled = true\ncron = "{cron}"\nidle_minutes = {idle_s / 60.0:.4f}\nbudget_minutes = {budget_minutes}\n'
            f'n = {n}\nmax_n = {4 * n}\nworkload = "recent"\ncandidates = {json.dumps(candidates)}\n')


@dataclass(frozen=True)
class NightEvent:
    kind: str
    at: str
    sentence: str
    numbers: dict[str, Any]


def night_events(unit: str) -> list[NightEvent]:
    """The tuning runs' history events, newest first."""
    history = History(paths.db_path())
    try:
        rows = [dict(r) for r in history.events(unit, limit=200)]
    finally:
        history.close()
    events = []
    for row in rows:
        if row["kind"] in TUNING_EVENTS:
            sentence, _, numbers = str(row["detail"]).partition(" | ")
            events.append(NightEvent(row["kind"], str(row["at"]), sentence, json.loads(numbers) if numbers else {}))
    return events


def wait_for_night(unit: str, wait: Callable[[str, Callable[[], object], float], Any],
                   timeout_s: float) -> NightEvent:
    """The first tuning event (the daemon's log in the failure message, through `wait`)."""
    found: NightEvent = wait("the nightly run's history event", lambda: next(iter(night_events(unit)), None),
                             timeout_s)
    return found


def generations(unit: str) -> list[dict[str, Any]]:
    history = History(paths.db_path())
    try:
        return [g.as_dict() for g in history.list(unit, limit=200)]
    finally:
        history.close()
