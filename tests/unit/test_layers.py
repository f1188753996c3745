"""The layout is the architecture: every import inside `specd` runs downwards in this order.

A newcomer reads the layers from `ls specd/`; this test keeps the code honest to that picture
(docs/architecture.md). Lazy imports inside functions count too: they are still dependencies.
"""

from __future__ import annotations

import ast
from pathlib import Path

SPECD = Path(__file__).resolve().parents[2] / "specd"

# Lowest first. Modules of the base layer may use each other; every other layer only those below.
LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"errors", "paths", "clock", "durable", "secrets", "store"}),
    frozenset({"profiles"}),
    frozenset({"gpu"}),
    frozenset({"engines"}),  # what differs between llama-server and vLLM
    frozenset({"unit"}),
    frozenset({"deploy"}),
    frozenset({"traffic"}),
    frozenset({"routing"}),
    frozenset({"emulator"}),
    frozenset({"proxy"}),
    frozenset({"daemon"}),
    frozenset({"tune"}),
    frozenset({"context"}),  # the composition root: builds the real seams from everything below
    frozenset({"setup", "web"}),  # front ends, like the CLI
    frozenset({"cli"}),
    frozenset({"__main__"}),
)
RANK = {name: rank for rank, layer in enumerate(LAYERS) for name in layer}


def package_of(path: Path) -> str:
    parts = path.relative_to(SPECD).with_suffix("").parts
    return parts[0]


def specd_imports(path: Path) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "specd":
                found += [(node.lineno, alias.name) for alias in node.names]
            elif node.module.startswith("specd."):
                found.append((node.lineno, node.module.split(".")[1]))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name.split(".")[1]) for a in node.names if a.name.startswith("specd.")]
    return found


def test_every_package_is_in_a_layer() -> None:
    packages = {package_of(p) for p in SPECD.rglob("*.py") if p.name != "__init__.py" or p.parent != SPECD}
    assert packages - {"__init__"} <= set(RANK), f"place these in LAYERS: {packages - set(RANK) - {'__init__'}}"


def test_no_import_runs_upwards() -> None:
    upward = []
    for path in sorted(SPECD.rglob("*.py")):
        source = package_of(path)
        if source == "__init__":
            continue
        for line, target in specd_imports(path):
            if target == source or target not in RANK:
                continue
            if RANK[target] > RANK[source] or (RANK[target] == RANK[source] and RANK[source] != 0):
                upward.append(f"{path.relative_to(SPECD.parent)}:{line}: {source} imports {target}")
    assert upward == []
