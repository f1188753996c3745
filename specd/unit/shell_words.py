"""Word expansion of a wrapper script, as the shell does it: quotes, backslashes, `~`, `$VAR`,
`${VAR}` and its `:-`/`-`/`:=`/`=`/`:+`/`+` forms, `$(...)`, and the splitting of unquoted expansions
at blanks. Used by specd/unit/shell.py, which follows the script's statements.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import NoReturn

from tree_sitter import Node

from specd.errors import UsageError

IFS = " \t\n"
GLOB = re.compile(r"(?<!\\)[*?\[]")
_BRACES = re.compile(r"\{[^{}]*(,|\.\.)[^{}]*\}")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class _Piece:
    text: str
    quoted: bool  # inside quotes: never split, and an empty quoted piece still makes a word
    expanded: bool  # the result of an expansion: unquoted, it is split at whitespace


@dataclass
class Expander:
    """What the shell knows while it runs a script: its variables, and where to say a refusal came from."""

    where: str
    variables: dict[str, str]
    notes: list[str] = field(default_factory=list)

    def refuse(self, node: Node, why: str) -> NoReturn:
        text = text_of(node).strip().replace("\n", " ")
        raise UsageError(f"{self.where}: the shell script {why} ({text[:70]!r}); specd follows a script only as far "
                         "as its outcome is known before the unit starts: write the llama-server command into "
                         "ExecStart= (or move the rest to ExecStartPre=), then import")

    def substitute(self, node: Node) -> str:
        """The output of $(...); the statement follower runs it."""
        raise NotImplementedError

    def words(self, node: Node) -> list[str]:
        """A command-line word after expansion: zero, one or several words, as the shell makes them."""
        if node.type in ("word", "concatenation") and _BRACES.search(_unquoted_text(node)):
            self.refuse(node, "uses brace expansion")
        if node.type == "command_name":
            node = node.named_children[0]
        pieces = self.pieces(node)
        fields: list[str] = []
        current: str | None = None
        for piece in pieces:
            if piece.quoted or not piece.expanded:
                current = (current or "") + piece.text
                continue
            for index, part in enumerate(re.split(f"[{IFS}]+", piece.text)):
                if index > 0 and current is not None:
                    fields.append(current)
                    current = None
                if part:
                    current = (current or "") + part
        if current is not None:
            fields.append(current)
        return fields

    def pieces(self, node: Node, *, quoted: bool = False) -> list[_Piece]:  # noqa: C901 - one branch per node kind
        kind = node.type
        if kind in ("word", "number"):
            text = text_of(node)
            if GLOB.search(text) and not quoted and "/" in text:
                self.refuse(node, "uses a glob pattern, which depends on the files there when the unit starts")
            if GLOB.search(text) and not quoted:
                self.notes.append(f"the script's {text} is a glob pattern without a /: the shell keeps it as written "
                                  "unless a file in the working directory matches it")
            if text.startswith("~") and not quoted and re.fullmatch(r"~(/.*)?", text):
                text = self.expand_variable("HOME", node) + text[1:]
            return [_Piece(re.sub(r"\\(.)", r"\1", text.replace("\\\n", "")), quoted, False)]
        if kind == "raw_string":
            return [_Piece(text_of(node)[1:-1], True, False)]
        if kind == "string":
            return self.string(node)
        if kind == "concatenation":
            return [p for child in node.children for p in self.pieces(child, quoted=quoted)]
        if kind == "simple_expansion":
            name = node.named_children[0] if node.named_children else node
            if name.type != "variable_name" or not _NAME.fullmatch(text_of(name)):
                self.refuse(node, f"uses the shell's own {text_of(node)}")
            return [_Piece(self.expand_variable(text_of(name), node), quoted, True)]
        if kind == "expansion":
            return [_Piece(self.expansion(node), quoted, True)]
        if kind == "command_substitution":
            return [_Piece(self.substitute(node), quoted, True)]
        if kind == "string_content":
            return [_Piece(text_of(node), True, False)]
        self.refuse(node, f"uses {kind.replace('_', ' ')}")

    def string(self, node: Node) -> list[_Piece]:
        """A "double-quoted" string: its text with \\$ \\` \\" \\\\ unescaped, and the expansions in it."""
        pieces: list[_Piece] = []
        position = node.start_byte + 1
        source = node.text or b""
        base = node.start_byte
        for child in node.named_children:
            # tree-sitter puts the blanks before an expansion inside a string into the expansion's node
            lead = 0 if child.type == "string_content" else len(text_of(child)) - len(text_of(child).lstrip(IFS))
            if child.start_byte + lead > position:
                gap = source[position - base:child.start_byte + lead - base].decode()
                pieces.append(_Piece(_dequote(gap), True, False))
            if child.type == "string_content":
                pieces.append(_Piece(_dequote(text_of(child)), True, False))
            else:
                pieces += self.pieces(child, quoted=True)
            position = child.end_byte
        if node.end_byte - 1 > position:
            pieces.append(_Piece(_dequote(source[position - base:node.end_byte - 1 - base].decode()), True, False))
        return pieces or [_Piece("", True, False)]

    def expand_variable(self, name: str, node: Node) -> str:
        if name not in self.variables:
            self.refuse(node, f"uses ${name}, which neither the unit nor the script sets, so specd cannot tell its "
                              "value (set it with Environment=)")
        return self.variables[name]

    def expansion(self, node: Node) -> str:
        """${NAME}, ${NAME:-word}, ${NAME-word}, ${NAME:=word}, ${NAME=word}, ${NAME:+word}, ${NAME+word}."""
        names = [c for c in node.named_children if c.type == "variable_name"]
        operator = next((text_of(c).strip() for c in node.children
                         if not c.is_named and text_of(c).strip() not in ("${", "}")), "")
        if len(names) != 1 or (operator and operator not in (":-", "-", ":=", "=", ":+", "+")):
            self.refuse(node, "uses a parameter expansion specd does not follow")
        name = text_of(names[0])
        if not operator:
            return self.expand_variable(name, node)
        rest = [c for c in node.named_children if c != names[0]]

        def word() -> str:  # expanded only when the operator uses it, as the shell does
            return "".join(p.text for c in rest for p in self.pieces(c))

        value = self.variables.get(name)
        is_set = value is not None and (value != "" or ":" not in operator)
        if operator.endswith("+"):
            return word() if is_set else ""
        if is_set:
            return value or ""
        default = word()
        if operator.endswith("="):
            self.variables[name] = default
        return default


def text_of(node: Node | None) -> str:
    return (node.text or b"").decode() if node is not None else ""


def _unquoted_text(node: Node) -> str:
    if node.type in ("string", "raw_string", "expansion", "command_substitution", "simple_expansion"):
        return ""
    if not node.children:
        return text_of(node)
    return "".join(_unquoted_text(child) for child in node.children)


def _dequote(text: str) -> str:
    return re.sub(r'\\([$`"\\])', r"\1", text.replace("\\\n", ""))
