"""Replaying a workload: rounds that keep conversations whole, at a concurrency level or on arrival times.

A bench interleaves profiles round by round (A B | B A | A B ...), so machine-load drift hits every
profile alike and the profile at a round boundary keeps running without a switch. A round is a
run of whole conversations: a conversation's turns go in order, each turn only after the previous
one's answer, with that answer (not the recorded one) in its history when the server produced one,
so the prompt cache (`timings.cache_n`) sees what it would see in production. Requests of different
conversations run side by side up to the concurrency level (closed loop), or start at their
`arrival_s` offsets (open loop) when the workload carries arrival times.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from specd.errors import Abandoned, UsageError
from specd.tune.targets import Reply, Target
from specd.tune.workloads import Workload, WorkloadRequest

MAX_OPEN_LOOP_WORKERS = 64


@dataclass(frozen=True)
class Item:
    """One request of a round: its index in the workload and the round position of the turn before it (or None)."""

    index: int
    request: WorkloadRequest
    after: int | None = None


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
    while total < n:
        for group in groups:
            if total >= n:
                break
            if len(rounds[-1]) >= per_round:
                rounds.append([])
            previous: int | None = None
            for index in group[: n - total]:
                rounds[-1].append(Item(index, workload.requests[index], previous))
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


def replay_round(target: Target, items: Sequence[Item], body_of: Callable[[WorkloadRequest], dict[str, Any]],
                 concurrency: int = 1, *, arrivals: bool = False) -> list[Done]:
    """Send one round; results come back in the round's order. Errors propagate after the round stops."""
    answers: dict[str, str] = {}
    finished = [threading.Event() for _ in items]
    lock = threading.Lock()
    running = [0]
    first_arrival = min((i.request.arrival_s or 0.0 for i in items), default=0.0)
    started_at = time.monotonic()
    failed = threading.Event()

    def send(position: int) -> Done:
        try:
            return attempt(position)
        finally:  # also when abandoned: the conversation's next turn must not wait forever
            finished[position].set()

    def attempt(position: int) -> Done:
        item = items[position]
        if item.after is not None:
            finished[item.after].wait()
        if failed.is_set():
            raise Abandoned("round abandoned after an earlier request failed")
        if arrivals and item.request.arrival_s is not None:
            delay = item.request.arrival_s - first_arrival - (time.monotonic() - started_at)
            if delay > 0:
                time.sleep(delay)
        with lock:
            body = _live_history(body_of(item.request), answers)
            running[0] += 1
            in_flight = running[0]
        try:
            reply = target.complete(body, in_flight=in_flight if target.concurrent else concurrency)
        except BaseException:
            failed.set()
            raise
        finally:
            with lock:
                running[0] -= 1
        recorded, live = _recorded_answer(items, position), answer_text(reply.payload)
        if recorded is not None and live is not None:
            with lock:
                answers[recorded] = live
        return Done(item, reply, in_flight if target.concurrent else concurrency)

    if not target.concurrent or (concurrency <= 1 and not arrivals):
        return [send(k) for k in range(len(items))]
    workers = MAX_OPEN_LOOP_WORKERS if arrivals else concurrency
    depth: list[int] = []
    for item in items:
        depth.append(0 if item.after is None else depth[item.after] + 1)
    # First turns of every conversation first, then second turns...: workers never idle behind one conversation.
    order = sorted(range(len(items)), key=lambda k: (depth[k], k))
    with ThreadPoolExecutor(max_workers=min(workers, len(items))) as pool:
        futures = {k: pool.submit(send, k) for k in order}
        wait(list(futures.values()))
    problems = [exc for k in range(len(items)) if (exc := futures[k].exception()) is not None]
    if problems:  # the request that failed, not one abandoned because of it
        raise next((p for p in problems if not isinstance(p, Abandoned)), problems[0])
    return [futures[k].result() for k in range(len(items))]
