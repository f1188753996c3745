"""The llama-server command of a `bash -c`/`sh -c` script in ExecStart=, found without running it.

Real units build their command in a small script: assignments, `[ "$X" = true ] && ARGS="$ARGS
--flag"`, `source` of a settings file, `$(... && echo --jinja || true)`, then `exec llama-server
$ARGS`. The script is parsed by tree-sitter's bash grammar and then followed the way the shell
would follow it, for the parts whose outcome is known before the unit starts: variables and
`export`, `cd`, `source`/`.` of a file of assignments, `[ ]`/`[[ ]]`/`test` on strings and
numbers, `&&`, `||`, `!`, `if`/`elif`/`else`, `true`/`false`/`:`, `set -e`-style options, `echo`
inside `$(...)`, and word expansion (`$VAR`, `${VAR}`, `${VAR:-default}` and its kin, quotes,
backslashes, `~`, splitting of unquoted expansions at whitespace). Nothing is executed: a step
whose outcome depends on the box when the unit starts (another program, a file test, a glob, a
pipeline, arithmetic) is refused, naming it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import PurePosixPath

import tree_sitter_bash
from tree_sitter import Language, Node, Parser

from specd.errors import UsageError
from specd.unit.shell_words import GLOB, Expander, text_of

_PARSER = Parser(Language(tree_sitter_bash.language()))
_NO_OPS = frozenset({"true", ":"})
_STRING_TESTS = {"=": lambda a, b: a == b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b}
_NUMBER_TESTS = {"-eq": lambda a, b: a == b, "-ne": lambda a, b: a != b, "-lt": lambda a, b: a < b,
                 "-le": lambda a, b: a <= b, "-gt": lambda a, b: a > b, "-ge": lambda a, b: a >= b}


@dataclass(frozen=True)
class ScriptCommand:
    argv: list[str]  # the llama-server command (or its launcher), fully expanded
    exported: dict[str, str]  # variables the script exports: llama-server sees them
    notes: tuple[str, ...]


class _Reached(Exception):
    """The script runs its program here: with `exec`, or as its last command."""

    def __init__(self, argv: list[str], via_exec: bool) -> None:
        super().__init__(argv[0])
        self.argv, self.via_exec = argv, via_exec


@dataclass
class _Shell(Expander):
    """Follows a script's statements; Expander does its words."""

    exported: set[str] = field(default_factory=set)
    read_source: Callable[[str], str | None] = lambda path: None
    output: list[str] | None = None  # inside $(...): what `echo` prints
    cwd: str | None = None  # where a `cd` to an absolute directory went

    def run(self, statements: list[Node]) -> int:
        status = 0
        for index, node in enumerate(statements):
            try:
                status = self.statement(node)
            except _Reached as reached:
                if not reached.via_exec and index < len(statements) - 1:
                    self.refuse(statements[index + 1], "goes on after running llama-server without `exec`")
                raise
        return status

    def statement(self, node: Node) -> int:  # noqa: C901 - one branch per kind of statement
        kind = node.type
        if kind == "command":
            return self.command(node)
        if kind == "variable_assignment":
            self.assign(node)
            return 0
        if kind == "declaration_command":
            return self.declare(node)
        if kind == "list":
            return self.and_or(node)
        if kind == "negated_command":
            return 0 if self.statement(node.named_children[0]) else 1
        if kind == "test_command":
            return 0 if self.test(node) else 1
        if kind == "if_statement":
            return self.if_statement(node)
        if kind == "compound_statement":
            return self.run(_statements(node))
        if kind == "unset_command":
            for name in node.named_children:
                self.variables.pop(text_of(name), None)
            return 0
        if kind == "redirected_statement":
            self.refuse(node, "redirects input or output")
        if kind == "pipeline":
            self.refuse(node, "runs a pipeline")
        if kind == "subshell":
            self.refuse(node, "runs a subshell")
        self.refuse(node, f"uses a {kind.replace('_', ' ')}")

    def and_or(self, node: Node) -> int:
        left, right = node.named_children[0], node.named_children[-1]
        operator = next(text_of(c) for c in node.children if not c.is_named)
        try:
            status = self.statement(left)
        except _Reached as reached:
            if not reached.via_exec:
                self.refuse(node, f"decides what to run after llama-server exits ({operator})")
            raise
        if (operator == "&&") == (status == 0):
            return self.statement(right)
        return status

    def if_statement(self, node: Node) -> int:
        clauses: list[tuple[list[Node], list[Node]]] = []
        condition: list[Node] = []
        body: list[Node] = []
        otherwise: list[Node] | None = None
        for index, child in enumerate(node.children):
            name = node.field_name_for_child(index)
            if child.type == "elif_clause":
                parts = _statements(child)
                clauses.append((parts[:1], parts[1:]))
            elif child.type == "else_clause":
                otherwise = _statements(child)
            elif name == "condition" and child.is_named:
                condition.append(child)
            elif child.is_named and child.type != "comment":
                body.append(child)
        for test, then in [(condition, body), *clauses]:
            if self.run(test) == 0:
                return self.run(then)
        return self.run(otherwise) if otherwise is not None else 0

    def assign(self, node: Node, *, export: bool = False) -> None:
        name = text_of(node.child_by_field_name("name") or node)
        value = node.child_by_field_name("value")
        if "[" in name or any(not c.is_named and text_of(c) == "+=" for c in node.children):
            self.refuse(node, "assigns an array or appends with +=")
        self.variables[name] = "" if value is None else "".join(p.text for p in self.pieces(value))
        if export:
            self.exported.add(name)

    def declare(self, node: Node) -> int:
        keyword = text_of(node.children[0])
        options = [text_of(c) for c in node.named_children if c.type == "word" and text_of(c).startswith("-")]
        if keyword not in ("export", "declare", "typeset", "local") or any(o not in ("-x",) for o in options):
            self.refuse(node, f"runs `{keyword} {' '.join(options)}`".rstrip())
        export = keyword == "export" or "-x" in options
        for child in node.named_children:
            if child.type == "variable_assignment":
                self.assign(child, export=export)
            elif child.type == "variable_name" and export:
                self.exported.add(text_of(child))
        return 0

    def command(self, node: Node) -> int:  # noqa: C901 - one branch per builtin
        if any(c.type == "variable_assignment" for c in node.named_children):
            self.refuse(node, "sets a variable for one command only")
        words = [w for child in node.named_children for w in self.words(child)]
        if not words:
            return 0
        name, args = words[0], words[1:]
        if name == "exec":
            if not args or args[0].startswith("-"):
                self.refuse(node, "uses `exec` with options or without a command")
            raise _Reached(args, via_exec=True)
        if name in _NO_OPS or name == "false":
            return 1 if name == "false" else 0
        if name == "cd" and len(args) <= 1:
            target = args[0] if args else self.variables.get("HOME", "~")
            self.cwd = target if target.startswith("/") else None
            self.notes.append(f"the script's `cd {target}` is not carried: a program path under it is made absolute, "
                              "other paths in the command are kept as written")
            return 0
        if name in ("source", ".") and len(args) == 1 and args[0].startswith("/"):
            return self.source(args[0], node)
        if name in ("test", "["):
            if name == "[" and args[-1:] != ["]"]:
                self.refuse(node, "has a `[` without `]`")
            return 0 if self.test_words(args[:-1] if name == "[" else args, node) else 1
        if name == "set" and all(re.fullmatch(r"[-+][euxvo]+|pipefail|errexit|nounset|xtrace", a) for a in args):
            return 0
        if name == "echo":
            newline = "\n"
            if args[:1] == ["-n"]:
                args, newline = args[1:], ""
            if self.output is None:
                self.notes.append(f"the script's `echo {' '.join(args)[:40]}` prints to the journal: not carried")
            else:
                self.output.append(" ".join(args) + newline)
            return 0
        if self.output is not None:
            self.refuse(node, f"runs {name} inside $(...)")
        raise _Reached(words, via_exec=False)

    def source(self, path: str, node: Node) -> int:
        text = self.read_source(path)
        if text is None:
            self.notes.append(f"the script sources {path}, which does not exist here: the shell says so and goes on")
            return 1
        tree = _parse(text, f"{path} (sourced by {self.where})")
        sourced = _Shell(f"{path} (sourced by the script)", self.variables, self.notes, exported=self.exported,
                         read_source=self.read_source)
        try:
            status = sourced.run(_statements(tree))
        except _Reached:
            self.refuse(node, f"sources {path}, which runs a program")
        self.notes.append(f"read the variables of {path}, which the script sources")
        return status

    # --- tests ---------------------------------------------------------------------------------------------------

    def test(self, node: Node) -> bool:
        expression = node.named_children[0] if node.named_children else None
        if expression is None:
            return False
        return self.expression(expression, double=text_of(node.children[0]) == "[[")

    def expression(self, node: Node, *, double: bool) -> bool:
        kind = node.type
        if kind == "parenthesized_expression":
            return self.expression(node.named_children[0], double=double)
        if kind in ("unary_expression", "negated_expression") and text_of(node.children[0]) == "!":
            return not self.expression(node.named_children[-1], double=double)
        if kind == "unary_expression":
            operator = text_of(node.child_by_field_name("operator") or node.children[0])
            return self.test_words([operator, self.operand(node.named_children[-1], node)], node)
        if kind == "binary_expression":
            operator = text_of(node.child_by_field_name("operator") or node.children[1])
            left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
            if left is None or right is None:
                self.refuse(node, "has a test it cannot read")
            if operator in ("&&", "||", "-a", "-o"):
                first = self.expression(left, double=double)
                if (operator in ("&&", "-a")) != first:
                    return first
                return self.expression(right, double=double)
            if double and right.type in ("extglob_pattern", "regex") or (double and GLOB.search(text_of(right))
                                                                         and right.type == "word"):
                self.refuse(node, "matches a pattern in [[ ]]")
            return self.test_words([self.operand(left, node), operator, self.operand(right, node)], node)
        return self.test_words([self.operand(node, node)], node)

    def operand(self, node: Node, test: Node) -> str:
        words = self.words(node)
        if len(words) != 1:
            self.refuse(test, f"tests {text_of(node)}, which is {len(words)} words here")
        return words[0]

    def test_words(self, args: list[str], node: Node) -> bool:
        if not args:
            return False
        if args[0] == "!":
            return not self.test_words(args[1:], node)
        if len(args) == 1:
            return args[0] != ""
        if len(args) == 2 and args[0] in ("-n", "-z"):
            return (args[1] != "") == (args[0] == "-n")
        if len(args) == 3 and args[1] in _STRING_TESTS:
            return bool(_STRING_TESTS[args[1]](args[0], args[2]))
        if len(args) == 3 and args[1] in _NUMBER_TESTS:
            try:
                return bool(_NUMBER_TESTS[args[1]](int(args[0]), int(args[2])))
            except ValueError:
                self.refuse(node, "compares words that are not numbers")
        if len(args) == 2 and re.fullmatch(r"-[a-zA-Z]", args[0]):
            self.refuse(node, f"tests a file ({args[0]} {args[1]}), which depends on the box when the unit starts")
        self.refuse(node, "has a test specd does not follow")
    def substitute(self, node: Node) -> str:
        inner = _Shell(self.where, dict(self.variables), self.notes, exported=set(self.exported),
                       read_source=self.read_source, output=[])
        try:
            inner.run(_statements(node))
        except _Reached as reached:
            self.refuse(node, f"runs {reached.argv[0]} inside $(...)")
        return "".join(inner.output or []).rstrip("\n")


def _statements(node: Node) -> list[Node]:
    return [c for c in node.named_children if c.type != "comment"]


def _parse(script: str, where: str) -> Node:
    tree = _PARSER.parse(script.encode())
    root = tree.root_node
    if root.has_error:
        raise UsageError(f"{where}: the shell script {script[:80]!r} does not parse as bash; systemd would run it "
                         "and the shell would fail")
    for child in root.children:
        if not child.is_named and text_of(child) == "&":
            raise UsageError(f"{where}: the shell script runs something in the background (&); write the "
                             "llama-server command into ExecStart= directly, then import")
    return root


def script_command(script: str, environment: dict[str, str], where: str, *,
                   read_source: Callable[[str], str | None]) -> ScriptCommand:
    """The command a `sh -c SCRIPT` ends in, with `environment` as the shell's environment.

    read_source(path) gives the text of a file the script sources (None: there is no such file)."""
    shell = _Shell(where, dict(environment), exported=set(environment), read_source=read_source)
    root = _parse(script, where)
    try:
        shell.run(_statements(root))
    except _Reached as reached:
        exported = {name: shell.variables[name] for name in sorted(shell.exported - set(environment))
                    if name in shell.variables}
        exported.update({name: shell.variables[name] for name in environment
                         if name in shell.variables and shell.variables[name] != environment[name]})
        argv = list(reached.argv)
        if shell.cwd and "/" in argv[0] and not argv[0].startswith("/"):  # ./llama-server after cd DIR
            argv[0] = str(PurePosixPath(shell.cwd) / argv[0])
        return ScriptCommand(argv, exported, tuple(shell.notes))
    raise UsageError(f"{where}: the shell script {script[:80]!r} runs no program; specd cannot see a "
                     "llama-server command in it")
