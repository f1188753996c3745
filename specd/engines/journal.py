"""The journal lines a failed start is explained by: the last ones, and the error that caused them.

llama-server's last lines say why it stopped. vLLM's do not: its API server ends with a traceback that
says "Engine core initialization failed. See root cause above.", and the cause — the engine process's
`ValueError: Available memory ...`, a model that does not load — was logged a hundred lines earlier.
So a revert shows the last lines and, above them, the last few lines before them that name a Python
exception (`SomethingError: text`), which llama-server's own log lines never look like.
"""

from __future__ import annotations

import re

_EXCEPTION = re.compile(r"(?:^|\] )[A-Z][A-Za-z0-9]*(?:Error|Exception): \S")  # at the start of a message
READ_LINES = 400  # how far back the cause is looked for


def condense(text: str, keep: int = 15, causes: int = 3) -> str:
    """The last `keep` lines, preceded by up to `causes` earlier lines that name an exception."""
    lines = text.splitlines()
    tail, earlier = lines[-keep:], lines[:-keep]
    found: list[str] = []
    for line in earlier:
        if _EXCEPTION.search(line) and line not in found and line not in tail:
            found.append(line)
    if not found:
        return "\n".join(tail)
    return "\n".join([*found[-causes:], f"[... {len(earlier)} earlier lines; the ones above name errors ...]",
                      *tail])
