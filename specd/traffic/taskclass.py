"""A cheap, deterministic guess at what kind of text a request will produce.

Speculative decoding pays off by task class (seed 004: MTP draft acceptance is 79-89% on code
and 39-48% on creative writing), so the proxy tags traffic and the tuner weighs profiles by it.
The guess must cost microseconds per request and give the same answer every time, so it is a
keyword/shape score over the last user message, not a model.

`edit` is judged on the request's shape, not its topic: a sizeable body to work on and an ask to
give it back changed (fix, rewrite, rename, translate ...). Its answer mostly repeats the prompt,
which is where n-gram lookup drafts well whatever the topic; judged by topic words, the same
"fix the spelling" request fell in `creative` or `analysis` by the words of its paragraph
(benchmarks/results/routing-real-text-learned.md).
"""

from __future__ import annotations

import re
from typing import Any, Literal, get_args

TaskClass = Literal["code", "factual", "analysis", "creative", "edit"]
TASK_CLASSES: tuple[TaskClass, ...] = get_args(TaskClass)

# Ties go to the earlier class: code signals are the least ambiguous, "factual" is the fallback.
# `edit` is not scored: an edit ask on a sizeable body decides it before any score is looked at.
_PRIORITY: tuple[TaskClass, ...] = ("code", "creative", "analysis", "factual")

# An ask to give the text back changed. With a sizeable body (EDIT_MIN_CHARS) it makes the request an
# `edit`; the emulator models such answers as repeating the input (n-gram drafts accept well).
_EDIT_ASK = re.compile(
    r"\b(?:rewrite|re-write|reformat|refactor|proofread|edit|repeat|copy|paraphrase|translate|return the full|"
    r"(?:fix|correct)(?: the| any| all)? (?:spelling|typos|grammar|formatting|punctuation|mistakes|errors)|"
    r"keep everything else|everything else unchanged|"
    r"add (?:type hints|docstrings|comments)|renamed?|convert .{0,40} to)\b",
    re.IGNORECASE,
)
EDIT_MIN_CHARS = 300


def _patterns(*words: str) -> re.Pattern[str]:
    return re.compile(r"\b(?:" + "|".join(words) + r")\b", re.IGNORECASE)


_CODE_STRONG = _patterns(
    r"write (?:a|an|the|me a) (?:python |rust |go |js |javascript |typescript |c\+\+ |sql |bash )?"
    r"(?:function|method|class|script|program|query|unit tests?)",
    r"implement", r"refactor", r"debug", r"traceback", r"stack trace", r"compile[sr]?",
    r"segfault", r"unit tests?", r"regex", r"snippet", r"code",
)
_CODE_LANG = _patterns(
    r"python", r"javascript", r"typescript", r"rust", r"golang", r"java", r"c\+\+", r"kotlin",
    r"sql", r"bash", r"shell script", r"html", r"css", r"json", r"yaml", r"dockerfile",
    r"numpy", r"pandas", r"react", r"api", r"cli",
)
_CODE_SHAPE = re.compile(
    r"^\s*(?:def |class |import |from \S+ import |fn |func |#include|public |const |let |var )"
    r"|[{};]\s*$|=>|\b\w+\([^)\n]{0,200}\)\s*[:{]",  # bounded: linear on "a(a(a(..." (no ')')
    re.MULTILINE,
)
_CREATIVE = _patterns(
    r"story", r"stories", r"poem", r"poetry", r"haiku", r"sonnet", r"limerick", r"lyrics", r"song",
    r"imagine", r"fiction", r"fairy tale", r"once upon", r"roleplay", r"role-play", r"pretend",
    r"character", r"dialogue", r"brainstorm", r"slogan", r"fable", r"screenplay", r"essay", r"blog post",
    r"diary", r"letter to", r"newsletter", r"op-ed", r"describe", r"descriptive", r"reflective", r"vivid",
    r"prose", r"profile of", r"piece about",
)
_ANALYSIS = _patterns(
    r"explain why", r"why does", r"why do", r"why is", r"why are", r"compare", r"comparison",
    r"contrast", r"analy[sz]e", r"analysis", r"trade-?offs?", r"pros and cons", r"evaluate",
    r"assess", r"versus", r"vs\.?", r"difference between", r"implications?", r"critique",
    r"weigh", r"should (?:i|we)", r"advantages", r"disadvantages", r"reasoning", r"argue",
)
_FACTUAL = _patterns(
    r"what is", r"what's", r"what are", r"who (?:is|was|were)", r"when (?:did|was|is)",
    r"where (?:is|was|are)", r"which", r"how many", r"how much", r"define", r"definition",
    r"translate", r"capital of", r"name the", r"list the", r"calculate", r"solve", r"prove",
)
# The guess needs no more than the start of a message; the proxy judges every request on its loop.
JUDGED_CHARS = 32 * 1024

_WH_START = re.compile(r"^\s*(?:what|who|when|where|which|how many|how much|is|are|does|did)\b",
                       re.IGNORECASE)


def _text_of(content: Any) -> str:
    """Message content is a string or a list of OpenAI content parts; keep only the text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text", "") for p in content if isinstance(p, dict)]
        return "\n".join(p for p in parts if isinstance(p, str) and p)
    return ""


def last_user_text(messages: list[dict[str, Any]]) -> str:
    """The text the class is judged on: the latest user turn, else the latest message of any role."""
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            return _text_of(message.get("content"))
    if messages and isinstance(messages[-1], dict):
        return _text_of(messages[-1].get("content"))
    return ""


def asks_to_repeat(text: str) -> bool:
    """An edit/rewrite request with a sizeable body to work on: its answer mostly repeats the input."""
    return len(text) >= EDIT_MIN_CHARS and _EDIT_ASK.search(text) is not None


def scores(text: str) -> dict[TaskClass, float]:
    """Per-class evidence; exposed so callers and tests can see why a class won."""
    code = 3.0 * text.count("```") / 2 + 2.0 * len(_CODE_STRONG.findall(text))
    code += 1.0 * len(_CODE_LANG.findall(text)) + 1.0 * min(len(_CODE_SHAPE.findall(text)), 4)
    creative = 2.0 * len(_CREATIVE.findall(text))
    analysis = 2.5 * len(_ANALYSIS.findall(text))  # outweighs a topic word like 'unit tests'
    factual = 1.5 * len(_FACTUAL.findall(text))
    words = len(text.split())
    if _WH_START.search(text) and words <= 25 and analysis == 0.0:
        factual += 2.0
    return {"code": code, "factual": factual, "analysis": analysis, "creative": creative, "edit": 0.0}


def classify(messages: list[dict[str, Any]]) -> TaskClass:
    """Guess the task class of a chat request from its last user message.

    An edit ask on a sizeable body is an `edit`, whatever its topic. Else the keyword scores decide;
    no evidence at all means a short message is a factual question and a long one an analysis
    (long free-form asks tend to want reasoning, not a one-line answer).
    """
    text = last_user_text(messages)[:JUDGED_CHARS]
    if asks_to_repeat(text):
        return "edit"
    evidence = scores(text)
    best = max(evidence.values())
    if best <= 0.0:
        return "factual" if len(text.split()) <= 40 else "analysis"
    return max(_PRIORITY, key=lambda c: (evidence[c], -_PRIORITY.index(c)))


CLASSIFY_CHARS = 4096  # of each message (and of each text part, at most 64 parts) the class is judged on


def task_class_of(messages: list[Any]) -> TaskClass:
    """The task class, judged on at most CLASSIFY_CHARS of each message's text.

    The classifier's regexes hold the interpreter while they run; on unbounded text (one 1 MB
    "word") they take minutes. The ask is in the first few KB of a message anyway.
    """
    clipped: list[Any] = []
    for message in messages:
        if isinstance(message, dict):
            content = message.get("content")
            if isinstance(content, str):
                message = {**message, "content": content[:CLASSIFY_CHARS]}
            elif isinstance(content, list):
                message = {**message, "content": [
                    {**part, "text": part["text"][:CLASSIFY_CHARS]}
                    if isinstance(part, dict) and isinstance(part.get("text"), str) else part
                    for part in content[:64]]}
        clipped.append(message)
    return classify(clipped)
