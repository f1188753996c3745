"""Workloads: built-in sets, JSONL validation with file/line errors, round trips, synthesis."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specd.errors import UsageError
from specd.traffic.taskclass import asks_to_repeat, classify, last_user_text
from specd.tune.workloads import (
    BUILTIN_WORKLOADS,
    DATA_DIR,
    STORED_WORKLOADS,
    WorkloadRequest,
    load_workload,
    long_context,
    multi_turn,
    save_workload,
)


@pytest.mark.parametrize("name", BUILTIN_WORKLOADS)
def test_builtin_workloads_load_and_are_consistent(name: str) -> None:
    workload = load_workload(name)
    assert workload.name == name and len(workload.requests) >= 10
    for request in workload.requests:
        assert request.task_class == classify(list(request.body["messages"])), request.body
        assert 1 <= request.max_tokens <= 1024
        assert "specd" not in request.body


@pytest.mark.parametrize("name", STORED_WORKLOADS)
def test_shipped_files_are_small_and_spread(name: str) -> None:
    path = DATA_DIR / f"{name}.jsonl"
    assert path.stat().st_size < 50_000
    lengths = {r.max_tokens for r in load_workload(name).requests}
    assert len(lengths) >= 3 and max(lengths) >= 4 * min(lengths)


@pytest.mark.parametrize("name", ["code", "factual", "analysis", "creative"])
def test_class_sets_are_pure(name: str) -> None:
    assert {r.task_class for r in load_workload(name).requests} == {name}


def test_prose_is_free_form_and_repeat_input_repeats() -> None:
    assert {r.task_class for r in load_workload("prose").requests} <= {"creative", "analysis"}
    for request in load_workload("repeat-input").requests:
        assert asks_to_repeat(last_user_text(list(request.body["messages"]))), request.body


def test_long_context_is_generated_and_long() -> None:
    workload = load_workload("long-context")
    assert not (DATA_DIR / "long-context.jsonl").exists()
    assert max(r.prompt_tokens for r in workload.requests) >= 40_000
    assert min(r.prompt_tokens for r in workload.requests) >= 4_000
    assert len({r.task_class for r in workload.requests}) == 4
    assert long_context() == long_context(), "deterministic"


def test_round_trip(tmp_path: Path) -> None:
    original = load_workload("code")
    path = tmp_path / "nested" / "copy.jsonl"
    save_workload(original, path)
    again = load_workload(path)
    assert again.requests == original.requests and again.name == "copy"
    extra = WorkloadRequest(body={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8},
                            task_class="factual", arrival_s=1.5, concurrency=4, conversation="c1")
    save_workload([extra], path)
    line = json.loads(path.read_text())
    assert line["specd"] == {"task_class": "factual", "arrival_s": 1.5, "concurrency": 4, "conversation": "c1"}
    assert load_workload(path).requests == (extra,)


def test_metadata_is_optional(tmp_path: Path) -> None:
    path = tmp_path / "plain.jsonl"
    path.write_text(json.dumps({"messages": [{"role": "user", "content": "Write a haiku about tea."}],
                                "max_tokens": 32}) + "\n\n")
    (request,) = load_workload(path).requests
    assert request.task_class == "creative" and request.concurrency == 1 and request.arrival_s is None


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"messages": [], "max_tokens": 5}', "non-empty list"),
        ('{"messages": [{"content": "x"}], "max_tokens": 5}', "messages[0]"),
        ('{"messages": [{"role": "user", "content": "x"}]}', "max_tokens"),
        ('{"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}', "max_tokens"),
        ('{"messages": [{"role": "user", "content": "x"}], "max_tokens": 5, "specd": {"clas": "code"}}',
         "unknown specd key 'clas'"),
        ('{"messages": [{"role": "user", "content": "x"}], "max_tokens": 5, "specd": {"task_class": "poetry"}}',
         "task_class 'poetry'"),
        ('{"messages": [{"role": "user", "content": "x"}], "max_tokens": 5, "specd": {"concurrency": 0}}',
         "concurrency"),
        ('{"messages": [{"role": "user", "content": "x"}], "max_tokens": 5, "specd": {"arrival_s": -1}}',
         "arrival_s"),
    ],
)
def test_bad_line_names_file_and_line(tmp_path: Path, line: str, problem: str) -> None:
    path = tmp_path / "bad.jsonl"
    good = json.dumps({"messages": [{"role": "user", "content": "ok"}], "max_tokens": 4})
    path.write_text(f"{good}\n{good}\n{line}\n")
    with pytest.raises(UsageError) as caught:
        load_workload(path)
    assert f"{path} line 3" in caught.value.message and problem in caught.value.message


def test_missing_and_empty(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no workload named 'nope'"):
        load_workload("nope")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(UsageError, match="no requests"):
        load_workload(empty)


def test_facts_state_source_size_mix_concurrency_conversations_and_sampling(tmp_path: Path) -> None:
    chat = multi_turn(conversations=2, turns=3)
    facts = chat.facts()
    assert (facts.source, facts.size, facts.conversations, facts.follow_ups) == ("builtin", 6, 2, 4)
    assert facts.concurrency == 1 and facts.arrival == "closed-loop" and facts.sampling == {"server defaults": 6}
    assert sum(facts.class_mix.values()) == 6
    levels = [1, 1, 8, 8, 8]
    requests = tuple(WorkloadRequest(body={"messages": [{"role": "user", "content": f"Write a haiku {i}"}],
                                           "max_tokens": 8, **({"temperature": 0.7} if i % 2 else {})},
                                     task_class="creative", concurrency=level, recorded_at=1.0e9 + i)
                     for i, level in enumerate(levels))
    path = tmp_path / "mine.jsonl"
    save_workload(requests, path)
    mine = load_workload(path)
    facts = mine.facts()
    assert (facts.source, facts.path, facts.size, facts.concurrency) == ("file", str(path), 5, 8)
    assert facts.concurrency_levels == {"1": 2, "8": 3} and facts.class_mix == {"creative": 5}
    assert facts.sampling == {"server defaults": 3, "temperature=0.7": 2}
    assert len(facts.concurrency_by_period) == 1 and facts.follow_ups == 0
    assert mine.requests == requests, "recorded_at and the levels round-trip through the file"
