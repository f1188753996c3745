"""Text-completion workloads for the tiny BASE model (Gemma 3 270M): prose, copy-edit, code, code edit.

A base model answers chat requests with junk (it was never tuned to follow a chat template), so
these are plain continuations sent to /v1/completions: each request is one prompt whose natural
continuation is the task's kind of text. Every workload draws its prompts from the same generator
with different seeds, so a tuner sample and a held-out truth set are two disjoint draws of one
distribution. Deterministic: the same seed gives the same prompt.

- prose: the opening of a story; the model writes on (new text: little for n-gram drafts to copy).
- copy-edit: a few-shot "fix the spelling" prompt; the answer repeats the paragraph with fixes.
- code: the start of a Python module; the model writes new code.
- code-edit: a block of Python and "the same code with one function renamed"; the answer repeats it.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Any

NAMES = ("Mara", "Tomas", "Ines", "Oskar", "Lena", "Hugo", "Nadia", "Pavel", "Greta", "Rafael", "Yuki", "Amara")
PLACES = ("a fishing village on the northern coast", "the last house on a mountain road",
          "a lighthouse at the edge of the bay", "a bakery near the old railway station",
          "a farm where the river bends", "a small town known for its clock tower",
          "an island reached only at low tide", "a city of canals and narrow bridges")
HABITS = ("walked down to the harbour before sunrise", "lit the stove and listened to the radio",
          "counted the boats coming back from the night's fishing", "wrote a letter she never sent",
          "fed the goats and checked the fences", "wound the clock in the square")
TURNS = ("But that morning, something was different.", "Then the letter arrived.",
         "Nobody expected the storm.", "On the seventh day, a stranger knocked at the door.")

SENTENCES = (
    "The committee met on Tuesday to discuss the budget for the coming year.",
    "Several members argued that the library needed new shelves and better lighting.",
    "The treasurer reported that donations had increased by a small amount since spring.",
    "A proposal to extend the opening hours on weekends was approved without objection.",
    "Volunteers will repaint the reading room before the start of the school term.",
    "The old heating system has failed twice this winter and must be replaced soon.",
    "Parents asked whether the children's section could host more story afternoons.",
    "The chair thanked everyone for their patience during the long renovation.",
    "A local artist offered to donate a painting for the entrance hall.",
    "The next meeting will take place in the community centre at seven o'clock.",
    "Members agreed to publish the minutes on the notice board by Friday.",
    "The garden behind the building will be cleared and planted with herbs.",
)
TYPOS = {"the": "teh", "committee": "comittee", "members": "memebrs", "library": "libary",
         "needed": "neded", "reported": "reportted", "donations": "donnations", "increased": "increaced",
         "approved": "aproved", "objection": "objecton", "volunteers": "volunters", "before": "befor",
         "system": "sytem", "replaced": "replacd", "children's": "childrens", "patience": "patiense",
         "building": "bulding", "agreed": "agred", "publish": "publsh", "meeting": "meating"}
FEW_SHOT = ("Fix the spelling mistakes in each text. Keep everything else exactly as it is.\n\n"
            "Text: The weather was wonderfull and we walkd along the beach untill sunset.\n"
            "Fixed: The weather was wonderful and we walked along the beach until sunset.\n\n")

TOPICS = ("invoices", "sensor readings", "user accounts", "shipping labels", "log files", "weather stations",
          "library loans", "train timetables", "recipe scaling", "inventory counts", "exam grades", "parking meters")
VERBS = ("parse", "load", "validate", "summarise", "normalise", "export")

FUNCTIONS = (
    "def add(a, b):\n    return a + b\n",
    "def scale(values, factor):\n    return [v * factor for v in values]\n",
    "def clamp(x, lo, hi):\n    return max(lo, min(hi, x))\n",
    "def mean(values):\n    return sum(values) / len(values)\n",
    "def first_word(text):\n    return text.split()[0] if text else ''\n",
    "def is_even(n):\n    return n % 2 == 0\n",
    "def squares(n):\n    return [i * i for i in range(n)]\n",
    "def total_length(words):\n    return sum(len(w) for w in words)\n",
    "def reverse_words(text):\n    return ' '.join(reversed(text.split()))\n",
    "def count_vowels(text):\n    return sum(1 for c in text.lower() if c in 'aeiou')\n",
)


def prose(seed: int) -> str:
    rng = random.Random(seed)
    name = rng.choice(NAMES)
    return (f"Chapter One\n\n{name} had lived in {rng.choice(PLACES)} for {rng.randint(3, 40)} years. "
            f"Every morning {name} {rng.choice(HABITS)}. {rng.choice(TURNS)}\n\n")


def copy_edit(seed: int) -> str:
    rng = random.Random(seed)
    sentences = rng.sample(SENTENCES, 5)
    words = " ".join(sentences).split(" ")
    with_typos = [TYPOS.get(w.lower(), w) if rng.random() < 0.7 else w for w in words]
    return f"{FEW_SHOT}Text: {' '.join(with_typos)}\nFixed:"


def code(seed: int) -> str:
    rng = random.Random(seed)
    topic = rng.choice(TOPICS)
    verb = rng.choice(VERBS)
    snake = topic.replace(" ", "_")
    return (f'"""Helpers for {topic}: {verb} them, check them and write a report."""\n\n'
            f"import csv\nimport json\nfrom dataclasses import dataclass\nfrom pathlib import Path\n\n\n"
            f"@dataclass\nclass {snake.title().replace('_', '')}Record:\n")


def code_edit(seed: int) -> str:
    rng = random.Random(seed)
    chosen = rng.sample(FUNCTIONS, 5)
    old = chosen[0].split("(")[0].removeprefix("def ")
    new = f"{old}_{rng.choice(('v2', 'new', 'fast', 'safe'))}"
    block = "\n\n".join(chosen)
    return (f"# Original module\n{block}\n\n# The same module with {old} renamed to {new}; "
            f"everything else unchanged\n")


GENERATORS: dict[str, Callable[[int], str]] = {
    "prose": prose, "copy-edit": copy_edit, "code": code, "code-edit": code_edit,
}
TASK_CLASS = {"prose": "creative", "copy-edit": "analysis", "code": "code", "code-edit": "code"}


def prompts(kind: str, first_seed: int, count: int) -> list[str]:
    """`count` prompts of a kind, seeds first_seed.. (disjoint seed ranges give disjoint samples)."""
    return [GENERATORS[kind](seed) for seed in range(first_seed, first_seed + count)]


def as_completion(body: Mapping[str, Any]) -> dict[str, Any]:
    """A chat-shaped bench body as a text completion: the messages' contents are the prompt."""
    prompt = "\n\n".join(str(m["content"]) for m in body["messages"])
    return {k: v for k, v in body.items() if k != "messages"} | {"prompt": prompt, "model": "tiny"}
