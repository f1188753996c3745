"""Plain-text layouts for narrow terminals: columns that stay whole, long text that wraps at spaces.

Rich's tables fold a narrow column a few characters at a time: at 80 columns `specd history`'s
detail came out one word per line and `specd doctor` cut paths mid-word. These functions wrap at
spaces only (a path longer than the line is left whole for the terminal to wrap) and give long
text the full width on lines of its own when a column would be too narrow for it. Pure: strings in,
lines out.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

GAP = "  "
NARROWEST_DETAIL = 40  # a detail column narrower than this reads badly; it moves under its row instead
DETAIL_INDENT = "    "


def wrapped(text: str, width: int, *, first: str = "", rest: str = "") -> list[str]:
    """`text` wrapped at spaces to `width`, behind the prefixes; words (paths) are never split and
    each of its own lines (a journal's) starts a line."""
    out: list[str] = []
    for paragraph in text.splitlines() or [""]:
        out += textwrap.wrap(paragraph, width=max(width, len(first) + 20), initial_indent=rest if out else first,
                             subsequent_indent=rest, break_long_words=False, break_on_hyphens=False)
    return out or [first.rstrip()]


def table_with_detail(headers: Sequence[str], rows: Sequence[Sequence[str]], details: Sequence[str],
                      width: int) -> list[str]:
    """A table whose columns keep their whole words and a last, free-text detail column. When the
    detail would get fewer than NARROWEST_DETAIL characters beside the columns, it goes on indented
    lines of its own below each row instead."""
    widths = [max([len(header), *(len(row[index]) for row in rows)]) for index, header in enumerate(headers)]
    fixed = sum(widths) + len(GAP) * len(widths)

    def line(cells: Sequence[str]) -> str:
        return GAP.join(cell.ljust(w) for cell, w in zip(cells, widths, strict=True))

    beside = width - fixed >= NARROWEST_DETAIL
    out = [(line(headers) + GAP + "detail") if beside else line(headers).rstrip()]
    out.append("─" * min(width, len(out[0]) if not beside else width))
    for row, detail in zip(rows, details, strict=True):
        if beside:
            out += wrapped(detail, width, first=line(row) + GAP, rest=" " * fixed) if detail else [line(row).rstrip()]
        else:
            out.append(line(row).rstrip())
            if detail:
                out += wrapped(detail, width, first=DETAIL_INDENT, rest=DETAIL_INDENT)
    return out


def findings(items: Sequence[tuple[str, bool, str, str]], width: int) -> list[tuple[bool, str]]:
    """`specd doctor`'s checks as lines (ok?, text): 'ok       check: detail', and for a problem
    an indented 'fix: ...' line, each wrapped at spaces with a hanging indent."""
    out: list[tuple[bool, str]] = []
    indent = " " * 9
    for check, ok, detail, fix in items:
        label = "ok" if ok else "problem"
        for text in wrapped(f"{check}: {detail}", width, first=f"{label:<9}", rest=indent):
            out.append((ok, text))
        if not ok and fix:
            out += [(ok, text) for text in wrapped(f"fix: {fix}", width, first=indent, rest=indent + "     ")]
    return out


def labelled(rows: Sequence[tuple[str, str]], width: int) -> list[str]:
    """'label  value' lines, values wrapped at spaces under themselves (`specd status`)."""
    pad = max((len(label) for label, _ in rows), default=0) + len(GAP)
    out: list[str] = []
    for label, value in rows:
        out += wrapped(value, width, first=label.ljust(pad), rest=" " * pad)
    return out
