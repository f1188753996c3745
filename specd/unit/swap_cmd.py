"""How llama-swap turns a model's `cmd` into argv (internal/config/commands.go): comment lines dropped,
a trailing backslash joined, then github.com/billziss-gh/golib/shlex's Posix dialect splits the
words (`split_posix` is a port of it: its escapes differ from Python's shlex inside double quotes).
"""

from __future__ import annotations


def strip_comments(cmd: str) -> str:
    """StripComments: drop lines whose first non-blank character is '#'."""
    return "\n".join(line for line in cmd.split("\n") if not line.strip().startswith("#"))


def sanitize_command(cmd: str) -> tuple[str, ...]:
    """SanitizeCommand: drop comment lines, turn a trailing backslash into a space, split POSIX-style."""
    lines = []
    for line in cmd.split("\n"):
        trimmed = line.strip()
        if trimmed.startswith("#"):
            continue
        lines.append(trimmed[:-1] + " " if trimmed.endswith("\\") else line)
    return split_posix("\n".join(lines))


_END = ""  # stands for "no next character"


def _escape(state: str, char: str, nxt: str) -> str | None:
    """golib shlex Posix.Escape: None = not an escape, _END = drop both, else the escaped char."""
    if char != "\\" or state == "'":
        return None
    if nxt in ("\n", _END):
        return _END
    if state == '"' and nxt not in '$`"\\':
        return None
    return nxt


def split_posix(line: str) -> tuple[str, ...]:
    """A port of github.com/billziss-gh/golib/shlex Dialect.Split for the Posix dialect."""
    tokens: list[str] = []
    token: list[str] | None = None
    state = [" "]
    i = 0
    while i < len(line):
        char, nxt = line[i], line[i + 1] if i + 1 < len(line) else _END
        i += 1
        top = state[-1]
        esc = _escape(top, char, nxt)
        if esc is not None:
            i += 1 if nxt != _END else 0
            if esc == _END:
                continue
        if top == " ":
            if esc is not None or char not in "\"' \t\n":
                state.append("A")
                token = (token or []) + [esc if esc is not None else char]
            elif char in "\"'":
                state += ["A", char]
                token = []
        elif top == "A":
            if esc is None and char in "\"'":
                state.append(char)
            elif esc is None and char in " \t\n":
                state.pop()
                tokens.append("".join(token or []))
                token = None
            else:
                token = (token or []) + [esc if esc is not None else char]
        elif esc is None and char == top:
            state.pop()
        else:
            token = (token or []) + [esc if esc is not None else char]
    if token is not None:
        tokens.append("".join(token))
    return tuple(tokens)
