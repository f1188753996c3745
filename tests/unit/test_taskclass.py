"""The task-class heuristic: clear examples of each class, message shapes, determinism."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specd.traffic.taskclass import JUDGED_CHARS, TASK_CLASSES, classify, last_user_text, scores


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": text}]


@pytest.mark.parametrize(
    "text",
    [
        "Write a Python function that merges two sorted lists.",
        "Why does this crash?\n```python\ndef f(x):\n    return x[0]\n```",
        "Refactor this class to use dataclasses:\nclass Point:\n    def __init__(self, x, y):\n        self.x = x",
        "Here is my traceback, please debug it: KeyError: 'id'",
        "implement a linked list in Rust with push and pop",
        "Write a SQL query that returns the ten largest orders per customer.",
    ],
)
def test_code(text: str) -> None:
    assert classify(user(text)) == "code"


@pytest.mark.parametrize(
    "text",
    [
        "What is the capital of Australia?",
        "Who was the first person to walk on the moon?",
        "When did the Berlin Wall fall?",
        "How many bones are in the human body?",
        "Define entropy.",
        "Translate 'good morning' into German.",
    ],
)
def test_factual(text: str) -> None:
    assert classify(user(text)) == "factual"


@pytest.mark.parametrize(
    "text",
    [
        "Explain why interest rates rise when inflation is high.",
        "Compare PostgreSQL and MySQL for a write-heavy workload and weigh the trade-offs.",
        "Analyse the pros and cons of remote work for a small startup.",
        "What is the difference between TCP and UDP, and which should a game use? Evaluate both.",
    ],
)
def test_analysis(text: str) -> None:
    assert classify(user(text)) == "analysis"


@pytest.mark.parametrize(
    "text",
    [
        "Write a short story about a lighthouse keeper who finds a message in a bottle.",
        "Compose a poem about autumn rain.",
        "Imagine you are a dragon guarding the last library on Earth. Describe your day.",
        "Brainstorm ten names for a bakery that sells only sourdough.",
        "Write a haiku about the sea.",
    ],
)
def test_creative(text: str) -> None:
    assert classify(user(text)) == "creative"


def test_only_the_last_user_message_counts() -> None:
    messages = [
        {"role": "user", "content": "Write a Python function that parses dates."},
        {"role": "assistant", "content": "def parse(s): ..."},
        {"role": "user", "content": "Now write a poem about that function's loneliness."},
    ]
    assert classify(messages) == "creative"


def test_content_parts_are_read() -> None:
    messages = [{"role": "user", "content": [{"type": "text", "text": "Write a haiku about frost."},
                                             {"type": "image_url", "image_url": {"url": "x"}}]}]
    assert last_user_text(messages) == "Write a haiku about frost."
    assert classify(messages) == "creative"


def test_no_evidence_falls_back_on_length() -> None:
    assert classify(user("hello there")) == "factual"
    assert classify(user(" ".join(["tell me about it"] * 20))) == "analysis"


def test_empty_and_odd_inputs() -> None:
    assert classify([]) == "factual"
    assert classify([{"role": "user", "content": None}]) == "factual"
    assert classify([{"role": "assistant", "content": "Compose a sonnet"}]) == "creative"


def test_scores_show_the_evidence() -> None:
    evidence = scores("```python\nimport os\n```")
    assert evidence["code"] > 0
    assert evidence["creative"] == 0


PARAGRAPH = ("The committee met on Tuesday to discuss the budget for teh coming year. Several memebrs argued "
             "that the libary neded new shelves and better lighting. The treasurer reportted that donnations had "
             "increaced by a small amount since spring. A proposal to extend the opening hours was aproved.")
CODE_BODY = "\n\n".join(f"def step_{i}(value):\n    total = value * {i}\n    return total - {i}" for i in range(6))


@pytest.mark.parametrize(
    "text",
    [
        "Fix the spelling mistakes in each text. Keep everything else exactly as it is.\n\nText: " + PARAGRAPH,
        f"Proofread this paragraph and return it with the mistakes corrected:\n\n{PARAGRAPH}",
        f"Translate the following into German:\n\n{PARAGRAPH}",
        f"Refactor this module to use f-strings, nothing else:\n```python\n{CODE_BODY}\n```",
        (f"# Original module\n{CODE_BODY}\n\n# The same module with step_1 renamed to step_one; everything else "
         "unchanged\n"),
    ],
)
def test_edit_an_ask_to_give_a_body_back_changed(text: str) -> None:
    """The answer repeats the prompt's body (where n-gram drafts pay), whatever words the body holds."""
    assert classify(user(text)) == "edit"


@pytest.mark.parametrize("topic", [
    "Write a short story about a lighthouse keeper and describe the storm.",  # creative words in the body
    "Compare the two budgets and explain why the second one is larger; evaluate both.",  # analysis words
    "What is the capital of the country where the meeting took place?",  # factual words
])
def test_edit_does_not_follow_the_topic_words_of_its_body(topic: str) -> None:
    body = f"{topic} {PARAGRAPH}"
    assert classify(user(f"Fix the spelling mistakes in this text and keep everything else:\n\n{body}")) == "edit"
    assert classify(user(body)) != "edit"  # the same body with no edit ask is judged on its words


def test_an_edit_ask_without_a_body_to_work_on_is_not_an_edit() -> None:
    assert classify(user("Rewrite my cover letter so it sounds more confident.")) != "edit"
    assert classify(user("Translate 'good morning' into German.")) == "factual"
    assert classify(user("Refactor this class to use dataclasses:\nclass Point:\n    x: int")) == "code"


@given(st.text(max_size=300))
def test_total_and_deterministic(text: str) -> None:
    first = classify(user(text))
    assert first in TASK_CLASSES
    assert classify(user(text)) == first


def _fastest_of(runs: int, text: str) -> float:
    import time

    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        assert classify([{"role": "user", "content": text}]) in TASK_CLASSES
        best = min(best, time.perf_counter() - started)
    return best


def test_an_adversarial_message_is_judged_in_linear_time() -> None:
    """`a(a(a(...` with no closing parenthesis once made the shape pattern quadratic: one request of
    64 parts stalled every stream on the proxy's event loop for about a minute. Judged on eight
    times the text it must take about eight times as long, not sixty-four: a ratio, so neither the
    box's speed nor its load decides (the absolute figures are benchmarks/event_loop_stalls.py's)."""
    small, large = "a(" * (JUDGED_CHARS // 16), "a(" * (JUDGED_CHARS // 2)  # 4 KiB and 32 KiB: what is judged
    ratio = _fastest_of(5, large) / _fastest_of(5, small)
    assert ratio < 24, f"8x the text took {ratio:.0f}x the time: quadratic"
