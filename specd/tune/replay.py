"""Replaying a workload: rounds that keep conversations whole, at a concurrency level or on arrival times.

A bench interleaves profiles round by round (A B | B A | A B ...), so machine-load drift hits every
profile alike and the profile at a round boundary keeps running without a switch. A round is a
run of whole conversations: a conversation's turns go in order, each turn only after the previous
one's answer, with that answer (not the recorded one) in its history when the server produced one,
so the prompt cache (`timings.cache_n`) sees what it would see in production. Requests of different
conversations run side by side up to the concurrency level (closed loop), or start at their
`arrival_s` offsets (open loop) when the workload carries arrival times; recorded traffic replays
each request once fewer than its recorded level are in flight (see `replay_round`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from specd.errors import UsageError
from specd.tune.targets import Reply, Target
from specd.tune.workloads import Workload, WorkloadRequest

MAX_OPEN_LOOP_WORKERS = 64


@dataclass(frozen=True)
class Item:
    """One request of a round: its index in the workload and the round position of the turn before it (or None)."""

    index: int
    request: WorkloadRequest
    after: int | None = None
    cycle: int = 0  # how many times the plan went through the workload before this one (a fresh seed each)


@dataclass(frozen=True)
class Done:
    item: Item
    reply: Reply
    in_flight: int  # requests in flight when this one started, itself included


def conversations(workload: Workload) -> list[list[int]]:
    """Workload indices grouped by conversation (first appearance order); a lone request is its own group."""
    groups: dict[str, list[int]] = {}
    order: list[list[int]] = []
    for index, request in enumerate(workload.requests):
        if request.conversation is None:
            order.append([index])
            continue
        if request.conversation not in groups:
            groups[request.conversation] = []
            order.append(groups[request.conversation])
        groups[request.conversation].append(index)
    return order


def plan_rounds(workload: Workload, n: int, per_round: int) -> list[list[Item]]:
    """`n` requests cycling through the workload's conversations, cut into rounds of whole conversations.

    A round closes once it holds at least `per_round` requests; the last conversation may be cut short
    so the total is exactly `n`.
    """
    if n < 1 or per_round < 1:
        raise UsageError(f"need n >= 1 and per_round >= 1, not {n} and {per_round}")
    groups = conversations(workload)
    rounds: list[list[Item]] = [[]]
    total = 0
    cycle = -1
    while total < n:
        cycle += 1
        for group in groups:
            if total >= n:
                break
            if len(rounds[-1]) >= per_round:
                rounds.append([])
            previous: int | None = None
            for index in group[: n - total]:
                rounds[-1].append(Item(index, workload.requests[index], previous, cycle))
                previous = len(rounds[-1]) - 1
                total += 1
    return rounds


def _live_history(body: Mapping[str, Any], answers: Mapping[str, str]) -> dict[str, Any]:
    """The body with recorded assistant turns replaced by what the server answered to them in this run."""
    messages = [dict(m) for m in body["messages"]]
    for message in messages:
        content = message.get("content")
        if message.get("role") == "assistant" and isinstance(content, str) and content in answers:
            message["content"] = answers[content]
    return {**body, "messages": messages}


def answer_text(payload: Mapping[str, Any]) -> str | None:
    choices = payload.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    message = choices[0].get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, str) else None


def _recorded_answer(items: Sequence[Item], position: int) -> str | None:
    """The assistant text the next turn of the conversation recorded for the request at `position`."""
    for other in items:
        if other.after == position:
            messages = other.request.body["messages"]
            for message in reversed(messages[:-1]):
                if message.get("role") == "assistant" and isinstance(message.get("content"), str):
                    return str(message["content"])
    return None


def _levels(items: Sequence[Item], concurrency: int | None, arrivals: bool) -> list[int]:
    """How many may be in flight when each request starts: the override, else the request's own level
    (open-loop requests are bounded by their schedule alone)."""
    if concurrency is not None:
        return [concurrency] * len(items)
    return [MAX_OPEN_LOOP_WORKERS if arrivals else max(1, i.request.concurrency) for i in items]


def replay_round(target: Target, items: Sequence[Item], body_of: Callable[[Item], dict[str, Any]],
                 concurrency: int | None = None, *, arrivals: bool = False,
                 deadline: float | None = None, clock: Callable[[], float] = time.monotonic) -> list[Done]:
    """Send one round; results come back in the round's order. The first error propagates once the
    requests already sent have finished; no request starts after it, nor after `deadline`
    (on `clock`; the round then returns the requests that ran).

    Requests start in the round's order (by arrival offset in open loop), each once its
    conversation's previous turn has been answered and fewer than its level are in flight: at a
    fixed `concurrency` that is a closed loop of that many clients; with the workload's own levels
    it replays recorded traffic as it arrived, a burst as a burst and a lone request alone.
    """
    levels = _levels(items, concurrency, arrivals)
    if not target.concurrent:  # it is told the level instead of meeting it
        answers: dict[str, str] = {}
        done = []
        for position, item in enumerate(items):
            if deadline is not None and clock() > deadline:
                break
            reply = target.complete(_live_history(body_of(item), answers), in_flight=levels[position])
            _remember(items, position, reply, answers)
            done.append(Done(item, reply, levels[position]))
        return done
    return _Dispatcher(target, items, body_of, levels, arrivals, deadline, clock).run()


def _remember(items: Sequence[Item], position: int, reply: Reply, answers: dict[str, str]) -> None:
    recorded, live = _recorded_answer(items, position), answer_text(reply.payload)
    if recorded is not None and live is not None:
        answers[recorded] = live


class _Dispatcher:
    """One round against a concurrent target: the calling thread starts requests, a pool sends them."""

    def __init__(self, target: Target, items: Sequence[Item], body_of: Callable[[Item], dict[str, Any]],
                 levels: Sequence[int], arrivals: bool, deadline: float | None,
                 clock: Callable[[], float]) -> None:
        self.target, self.items, self.body_of, self.levels = target, items, body_of, levels
        self.deadline, self.clock = deadline, clock
        first = min((i.request.arrival_s or 0.0 for i in items), default=0.0)
        self.offsets = [(i.request.arrival_s or 0.0) - first if arrivals else 0.0 for i in items]
        self.order = sorted(range(len(items)), key=lambda k: (self.offsets[k], k))
        self.cond = threading.Condition()
        self.running = 0
        self.finished: set[int] = set()
        self.results: dict[int, Done] = {}
        self.answers: dict[str, str] = {}
        self.failure: BaseException | None = None

    def _ready(self, waiting: Sequence[int]) -> int | None:
        """The first waiting request whose conversation's previous turn has been answered."""
        return next((k for k in waiting if self.items[k].after is None or self.items[k].after in self.finished),
                    None)

    def run(self) -> list[Done]:
        started_at = self.clock()
        waiting = list(self.order)
        with ThreadPoolExecutor(max_workers=min(max(self.levels), len(self.items))) as pool, self.cond:
            while waiting and self.failure is None:
                if self.deadline is not None and self.clock() > self.deadline:
                    break
                head = self._ready(waiting)
                delay = 0.0 if head is None else self.offsets[head] - (self.clock() - started_at)
                if head is None or self.running >= self.levels[head] or delay > 0:
                    until_deadline = None if self.deadline is None else max(self.deadline - self.clock(), 0.0)
                    waits = [w for w in (delay if head is not None and delay > 0 else None, until_deadline)
                             if w is not None]
                    self.cond.wait(min(waits) if waits else None)
                    continue
                waiting.remove(head)
                self.running += 1
                body = _live_history(self.body_of(self.items[head]), self.answers)
                pool.submit(self._send, head, body, self.running)
            while self.running:
                self.cond.wait()
        if self.failure is not None:
            raise self.failure
        return [self.results[k] for k in range(len(self.items)) if k in self.results]

    def _send(self, position: int, body: dict[str, Any], in_flight: int) -> None:
        try:
            reply = self.target.complete(body, in_flight=in_flight)
        except BaseException as exc:  # noqa: BLE001 - handed to the dispatching thread, which raises it
            with self.cond:
                self.failure = self.failure or exc
                self.running -= 1
                self.cond.notify_all()
            return
        with self.cond:
            _remember(self.items, position, reply, self.answers)
            self.results[position] = Done(self.items[position], reply, in_flight)
            self.finished.add(position)
            self.running -= 1
            self.cond.notify_all()
