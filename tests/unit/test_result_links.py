"""A figure is a file: every result file README.md and docs/*.md link to exists and says where its
figures come from: the command that made them, or (quoted figures) the articles they are from."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]*benchmarks/results/[^)#\s]+)\)")


def linked_results() -> list[tuple[Path, Path]]:
    found = []
    for doc in DOCS:
        for target in LINK.findall(doc.read_text(encoding="utf-8")):
            found.append((doc, (doc.parent / target).resolve()))
    return found


def test_the_docs_link_result_files() -> None:
    docs_with_links = {doc.name for doc, _ in linked_results()}
    assert {"README.md", "reliability.md"} <= docs_with_links


@pytest.mark.parametrize(("doc", "result"), linked_results(), ids=lambda p: p.name)
def test_each_linked_result_file_exists_and_names_its_command(doc: Path, result: Path) -> None:
    assert result.is_file(), f"{doc.name} links {result}, which is not in the tree"
    if result.suffix == ".md":
        text = result.read_text(encoding="utf-8")
        assert re.search(r"^(?:[-|] |\*\*).*\bcommands?\b|not specd's measurements", text,
                         re.MULTILINE | re.IGNORECASE), (
            f"{result.name} says neither which command made it nor that it quotes others' figures")
