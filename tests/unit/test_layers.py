"""The layout is the architecture: every import inside `specd` runs downwards in this order.

A newcomer reads the layers from `ls specd/` and from docs/architecture.md's table; this test
keeps the code and the table honest to that picture. Lazy imports inside functions count too
(they are still dependencies), and so do dynamic ones (`importlib.import_module("specd.x")`,
`__import__(f"specd.x.{name}")`), which an AST scan of import statements alone would miss.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SPECD = REPO / "specd"
ARCHITECTURE = REPO / "docs" / "architecture.md"

# Lowest first. Modules of the base layer may use each other; every other layer only those below.
LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"errors", "paths", "clock", "durable", "secrets", "store", "endpoint"}),
    frozenset({"profiles"}),
    frozenset({"gpu"}),
    frozenset({"engines"}),  # what differs between llama-server and vLLM
    frozenset({"unit"}),
    frozenset({"deploy"}),
    frozenset({"traffic"}),
    frozenset({"routing"}),  # per-request routing: the proxy and the daemon use it
    frozenset({"emulator"}),  # the tuner's in-process model target imports it
    frozenset({"proxy"}),  # the request path; the daemon runs it
    frozenset({"daemon"}),
    frozenset({"tune"}),
    frozenset({"context"}),  # the composition root: builds the real seams from everything below
    frozenset({"setup", "web"}),  # front ends, like the CLI
    frozenset({"cli"}),
    frozenset({"__main__"}),
)
RANK = {name: rank for rank, layer in enumerate(LAYERS) for name in layer}
DYNAMIC = "<dynamic>"  # an import whose target the scan cannot read: refused wherever it is
_IMPORT_FUNCTIONS = frozenset({"import_module", "__import__"})


def package_of(path: Path) -> str:
    parts = path.relative_to(SPECD).with_suffix("").parts
    return parts[0]


def _dynamic_target(call: ast.Call) -> str | None:
    """The specd package a dynamic import names, DYNAMIC when it cannot be read, None when it is
    no dynamic import or not of specd."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    if name not in _IMPORT_FUNCTIONS or not call.args:
        return None
    argument = call.args[0]
    if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
        literal = argument.value
    elif isinstance(argument, ast.JoinedStr):  # f"specd.tune.{name}": its literal head
        head = argument.values[0] if argument.values else None
        literal = head.value if isinstance(head, ast.Constant) and isinstance(head.value, str) else ""
        if literal.count(".") < 2 and literal.startswith("specd"):
            return DYNAMIC  # f"specd.{name}": the package itself is computed
    else:
        return DYNAMIC  # a computed name: which package it loads cannot be checked
    if literal == "specd" or not literal.startswith("specd."):
        return None
    return literal.split(".")[1]


def specd_imports(source: str) -> list[tuple[int, str]]:
    """(line, specd package) for every import of specd in `source`: statements, lazy ones, dynamic ones."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "specd":
                found += [(node.lineno, alias.name) for alias in node.names]
            elif node.module.startswith("specd."):
                found.append((node.lineno, node.module.split(".")[1]))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name.split(".")[1]) for a in node.names if a.name.startswith("specd.")]
        elif isinstance(node, ast.Call):
            target = _dynamic_target(node)
            if target is not None:
                found.append((node.lineno, target))
    return found


def upward_imports(source: str, package: str) -> list[str]:
    """What `source`, a module of `package`, imports against the layers."""
    upward = []
    for line, target in specd_imports(source):
        if target == DYNAMIC:
            upward.append(f"{line}: {package} imports a specd module whose name is computed")
            continue
        if target == package or target not in RANK:
            continue
        if RANK[target] > RANK[package] or (RANK[target] == RANK[package] and RANK[package] != 0):
            upward.append(f"{line}: {package} imports {target}")
    return upward


def test_every_package_is_in_a_layer() -> None:
    packages = {package_of(p) for p in SPECD.rglob("*.py") if p.name != "__init__.py" or p.parent != SPECD}
    assert packages - {"__init__"} <= set(RANK), f"place these in LAYERS: {packages - set(RANK) - {'__init__'}}"


def test_no_import_runs_upwards() -> None:
    upward = []
    for path in sorted(SPECD.rglob("*.py")):
        source = package_of(path)
        if source == "__init__":
            continue
        upward += [f"{path.relative_to(REPO)}:{found}"
                   for found in upward_imports(path.read_text(encoding="utf-8"), source)]
    assert upward == []


def test_the_scan_sees_lazy_and_dynamic_imports_of_a_higher_layer() -> None:
    """The check itself: each way of reaching the tuner from the daemon is caught (the daemon once
    loaded the nightly run with importlib.import_module, which the statement scan could not see)."""
    for reach_up in ('import importlib\nimportlib.import_module("specd.tune.night")\n',
                     'from importlib import import_module\nimport_module(f"specd.tune.{name}")\n',
                     '__import__("specd.tune")\n',
                     'def later():\n    from specd.tune import night\n',
                     'import importlib\nimportlib.import_module(name)\n',
                     'import importlib\nimportlib.import_module(f"specd.{name}")\n'):
        assert upward_imports(reach_up, "daemon"), reach_up
    for fine in ('import importlib\nimportlib.import_module("specd.proxy.relay")\n',
                 'import importlib.resources\nimportlib.resources.files("specd")\n',
                 '__import__(f"specd.cli.{optional}")\n'):
        assert upward_imports(fine, "daemon" if "cli" not in fine else "cli") == [], fine


def table_order() -> list[str]:
    """The packages in docs/architecture.md's layer table, top row first."""
    rows = re.findall(r"^\| `([a-z_]+)(?:/|\.py)` \|", ARCHITECTURE.read_text(encoding="utf-8"), re.MULTILINE)
    return list(rows)


def test_the_docs_layer_table_lists_every_layer_in_the_tests_order() -> None:
    rows = table_order()
    assert set(rows) == set(RANK) - {"__main__"}, "docs/architecture.md's table and LAYERS name different packages"
    ranks = [RANK[name] for name in rows]
    out_of_order = [f"{rows[i]} (layer {ranks[i]}) is listed after {rows[i - 1]} (layer {ranks[i - 1]})"
                    for i in range(1, len(rows)) if ranks[i] < ranks[i - 1]]
    assert out_of_order == [], "the table must list the layers lowest first, as LAYERS does"
