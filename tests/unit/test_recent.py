"""The traffic to bench on, from what the proxy recorded: captured bodies and the recorded shape."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest

from specd.errors import UsageError
from specd.profiles.config import Deployment
from specd.traffic import records as traffic
from specd.traffic.capture import CAPTURE_NAME, BodyCapture
from specd.traffic.shape import conversation_of, request_shape
from specd.traffic.taskclass import classify
from specd.tune.recent import capture_dir, recent_workload, resolve_workload, synthetic_workload
from specd.tune.workloads import parse_line

UNIT = "llama.service"
CODE = "Write a Python function that parses a CSV line."
POEM = "Write a short poem about the sea."


@pytest.fixture
def deployment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Deployment:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return Deployment(unit=UNIT, scope="user", profiles_dir=tmp_path)


def rows(*records: traffic.TrafficRecord) -> None:
    conn = traffic.open_db()
    traffic.insert_records(conn, records)
    conn.close()


def row(ts: float, **fields: object) -> traffic.TrafficRecord:
    base: dict[str, object] = {"endpoint": "/v1/chat/completions", "stream": False, "status": 200, "total_ms": 900.0,
                               "unit": UNIT, "task_class": "code", "prompt_tokens": 300, "completion_tokens": 120}
    return traffic.TrafficRecord(ts=ts, **{**base, **fields})  # type: ignore[arg-type]


def chat(ask: str, **extra: object) -> dict[str, object]:
    return {"messages": [{"role": "user", "content": ask}], **extra}


# --- what the proxy records of a request ----------------------------------------------------------


def test_a_requests_shape_keeps_sampling_and_conversation_but_no_content() -> None:
    opening = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a prime."}]
    later = [*opening, {"role": "assistant", "content": "7"}, {"role": "user", "content": "Another one."}]
    first = request_shape({"messages": opening, "temperature": 0.7, "top_p": 0.9, "stream": True, "seed": 3})
    second = request_shape({"messages": later, "temperature": True})
    assert json.loads(first.sampling or "") == {"temperature": 0.7, "top_p": 0.9}  # only sampling keys, numbers
    assert second.sampling is None and (first.turn, second.turn) == (1, 2)
    assert first.conversation == second.conversation and len(first.conversation or "") == 12
    assert "prime" not in json.dumps(first.__dict__)
    other = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a colour."}]
    assert conversation_of(other)[0] != first.conversation
    assert request_shape(None).conversation is None and conversation_of([{"role": "system", "content": "x"}]) == (
        None, 1)


def test_traffic_rows_written_by_an_older_specd_gain_the_new_columns(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "old.db"
    old = sqlite3.connect(db)
    old.executescript(traffic.SCHEMA.replace("  sampling TEXT,\n  conversation TEXT,\n  turn INTEGER NOT NULL "
                                             "DEFAULT 1\n", "").replace("error TEXT,\n);", "error TEXT\n);"))
    old.execute("INSERT INTO traffic (ts, endpoint, stream, status, total_ms) VALUES (1, '/v1/chat/completions', 0, "
                "200, 5)")
    old.commit()
    old.close()
    conn = traffic.open_db(db)
    (before,) = traffic.fetch_records(conn, 0)
    assert (before.sampling, before.conversation, before.turn) == (None, None, 1)
    traffic.insert_records(conn, [row(2.0, sampling='{"temperature":0.2}', conversation="abc", turn=3)])
    assert traffic.fetch_records(conn, 1.5)[0].turn == 3


def test_a_captured_line_is_a_workload_line_with_when_and_how_busy(tmp_path: Path) -> None:
    capture = BodyCapture(tmp_path / "capture", 1 << 20)
    before = time.time()
    assert capture.write(chat(CODE, max_tokens=64, temperature=0.3), in_flight=5)
    line = (tmp_path / "capture" / CAPTURE_NAME).read_text().strip()
    request = parse_line(line, tmp_path / "capture" / CAPTURE_NAME, 1)
    assert request.concurrency == 6 and request.recorded_at is not None and request.recorded_at >= before - 1
    assert request.body["temperature"] == 0.3 and "specd" not in request.body and request.task_class == "code"


# --- captured bodies replay at the concurrency they met ---------------------------------------------


def test_captured_bodies_from_before_levels_were_recorded_replay_at_the_recorded_concurrency(
        deployment: Deployment) -> None:
    """The captured branch used to return before the recorded concurrency was applied: 8 in flight in
    production, one at a time in the bench."""
    now = time.time()
    rows(*(row(now - 100 + i, in_flight=7) for i in range(8)))
    directory = capture_dir(deployment)
    directory.mkdir(parents=True)
    (directory / CAPTURE_NAME).write_text("".join(json.dumps(chat(f"{CODE} Number {i}.", max_tokens=32)) + "\n"
                                                  for i in range(8)))
    workload = recent_workload(deployment, 10)
    assert workload.origin == "captured" and len(workload.requests) == 8
    assert workload.concurrency == 8 and {r.concurrency for r in workload.requests} == {8}
    facts = workload.facts()
    assert (facts.source, facts.size, facts.concurrency, facts.class_mix) == ("captured", 8, 8, {"code": 8})


def test_captured_bodies_keep_their_own_level_order_and_conversations(deployment: Deployment) -> None:
    capture = BodyCapture(capture_dir(deployment), 1 << 20)
    opening = chat(POEM, max_tokens=16)
    for index, level in enumerate([0, 0, 3, 3, 3, 3]):
        capture.write(chat(f"{CODE} Variant {index}.", max_tokens=24, temperature=0.8), in_flight=level)
    capture.write(opening, in_flight=0)
    capture.write(opening, in_flight=1)  # the same opening again: a repeat, not a follow-up
    follow = {"messages": [*opening["messages"], {"role": "assistant", "content": "Waves."},  # type: ignore[list-item]
                           {"role": "user", "content": "Now a longer one."}], "max_completion_tokens": 40}
    capture.write(follow, in_flight=0)
    workload = recent_workload(deployment, 10)
    levels = [r.concurrency for r in workload.requests]
    assert levels == [1, 1, 4, 4, 4, 4, 1, 2, 1], "each body keeps the level it met, in arrival order"
    assert workload.requests[-1].max_tokens == 40
    conversations = [r.conversation for r in workload.requests]
    assert conversations[:7] == [None] * 7 and conversations[7] is not None and conversations[7] == conversations[8]
    facts = workload.facts()
    assert facts.follow_ups == 1 and facts.conversations == 1
    assert facts.sampling == {"temperature=0.8": 6, "server defaults": 3}
    assert facts.concurrency_levels == {"1": 4, "2": 1, "4": 4}


# --- without capture: synthesized from the recorded shape -------------------------------------------


def test_the_synthetic_workload_keeps_mix_lengths_sampling_turns_and_levels_together(deployment: Deployment) -> None:
    now = time.time()
    sampled = '{"temperature":0.6,"top_p":0.95}'
    recorded = [row(now - 300 + i, in_flight=7, sampling=sampled, prompt_tokens=400, completion_tokens=200)
                for i in range(6)]
    recorded += [row(now - 200, task_class="creative", in_flight=0, conversation="c1", turn=1, prompt_tokens=120,
                     completion_tokens=60),
                 row(now - 190, task_class="creative", in_flight=0, conversation="c1", turn=2, prompt_tokens=220,
                     completion_tokens=90)]
    recorded += [row(now - 150, status=503, in_flight=40)]  # failures are not traffic to bench on
    rows(*recorded)
    workload = recent_workload(deployment, 40)
    assert workload.origin == "synthetic" and len(workload.requests) >= 40
    for request in workload.requests:
        assert classify(list(request.body["messages"])) == request.task_class
        if request.task_class == "code":
            assert (request.concurrency, request.max_tokens) == (8, 200)
            assert (request.body["temperature"], request.body["top_p"]) == (0.6, 0.95)
            assert abs(request.prompt_tokens - 400) <= 40 and request.conversation is None
        else:
            assert request.concurrency == 1 and "temperature" not in request.body
            assert request.conversation is not None
    creative = [r for r in workload.requests if r.task_class == "creative"]
    assert creative and {r.max_tokens for r in creative} == {60, 90}
    pairs = Counter(r.conversation for r in creative)
    assert set(pairs.values()) == {2}, "a recorded conversation is resampled whole"
    seen: set[str | None] = set()
    openings = []
    for request in workload.requests:
        if request.conversation is None or request.conversation not in seen:
            openings.append(request.recorded_at or 0.0)
        seen.add(request.conversation)
    assert openings == sorted(openings), "conversations in the order the traffic opened them"
    assert workload.facts().follow_ups == len(pairs)
    assert synthetic_workload(recorded, 40) == synthetic_workload(recorded, 40), "deterministic"


def test_without_traffic_recent_says_what_to_do(deployment: Deployment) -> None:
    with pytest.raises(UsageError, match="no recorded traffic") as caught:
        recent_workload(deployment, 10)
    assert caught.value.hint is not None and "--workload" in caught.value.hint
    with pytest.raises(UsageError, match="--period"):
        resolve_workload("code", deployment, 10, "night")


def test_a_period_keeps_only_that_time_of_days_traffic(deployment: Deployment) -> None:
    night = time.mktime(time.localtime(time.time() - 86400)[:3] + (2, 0, 0, 0, 0, -1))
    day = night + 12 * 3600
    rows(*(row(night + i, in_flight=0) for i in range(4)), *(row(day + i, in_flight=7) for i in range(4)))
    assert recent_workload(deployment, 8, period="night").concurrency == 1
    assert recent_workload(deployment, 8, period="afternoon").concurrency == 8
    both = recent_workload(deployment, 64)
    assert both.facts().concurrency_by_period == {"night": 1, "afternoon": 8}
    with pytest.raises(UsageError, match="in the evening"):
        recent_workload(deployment, 8, period="evening")
