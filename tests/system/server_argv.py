"""The llama-server command inside what systemd runs, and argv comparison with llama-server's own aliases.

Used by the import round-trip tests. Nothing here comes from specd: the alias table is read from
the real llama-server's `--help`, the command from systemd's own parse (tests/system/systemd_truth.py).
"""

from __future__ import annotations

import math
import re
import shlex
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

# llama-server, a fork's renamed copy (ik_llama-server, ...), or `server`: llama.cpp's name for the
# same program until June 2024 (units of old builds still run it).
_SERVER_NAME = re.compile(r"(^|[-_])llama[-_]server$|^server$")
_SHELLS = frozenset({"sh", "bash", "dash", "zsh"})
_SHELL_SYNTAX = re.compile(r"[;|&<>()`$\n*?]")
_NAMES = re.compile(r"^(-[\w-]+(?:,\s*-[\w-]+)*)")


@dataclass(frozen=True)
class ServerCommand:
    """llama-server's binary and arguments, and the non-transparent wrapper around it (toolbox, docker...)."""

    wrapper: tuple[str, ...]
    binary: str
    args: tuple[str, ...]


@dataclass(frozen=True)
class NotAServerCommand:
    """A command in which no llama-server command line can be found without running it."""

    reason: str
    names: tuple[str, ...]  # what a clear refusal would mention (the script, the shell)


@dataclass(frozen=True)
class Aliases:
    """Each spelling of each llama-server option, mapped to one canonical spelling, and its arity."""

    canonical: dict[str, str]
    takes_value: dict[str, bool]

    def canon(self, flag: str) -> str:
        return self.canonical.get(flag, flag)


def _basename(word: str) -> str:
    return word.rsplit("/", 1)[-1]


def _unwrap_env(words: list[str]) -> list[str]:
    index = 1
    while index < len(words):
        word = words[index]
        if word in ("-i", "--ignore-environment", "-"):
            index += 1
        elif word in ("-u", "--unset"):
            index += 2
        elif word.startswith("--unset=") or ("=" in word and not word.startswith("-")):
            index += 1
        else:
            break
    return words[index:]


# bash looks a function up before its builtins (outside POSIX mode), so a function named exec sees
# the exact argv the script would exec, after the real shell did all of its expansion.
_EXEC_RECORDER = 'exec() { printf "%s\\0" "$@" > "$SPECD_TRUTH_EXEC_RECORD"; builtin exit 0; }\n'


def run_shell_program(shell: str, options: list[str], script: str, env: dict[str, str],
                      work: Path) -> list[str] | None:
    """What a bash script execs, as the real bash computes it (None: it execs nothing, or it is not bash).

    The script runs in `work` with PATH pointing at an empty folder, so only the shell's builtins and
    programs named by absolute path could run; `exec` is a recording function. A login shell's
    profile files are not read (-l is dropped): they would set PATH and run programs of this box."""
    if _basename(shell) != "bash":
        return None
    record = work / "exec-record"
    record.unlink(missing_ok=True)
    empty = work / "empty-path"
    empty.mkdir(exist_ok=True)
    flags = [o.replace("l", "") for o in options if not o.startswith("--")]
    flags = [f for f in flags if f not in ("-", "")]
    subprocess.run([shell, *flags, _EXEC_RECORDER + script], cwd=work, capture_output=True, timeout=30,
                   check=False, env={**env, "PATH": str(empty), "SPECD_TRUTH_EXEC_RECORD": str(record)})
    if not record.exists():
        return None
    data = record.read_bytes().decode()
    return data.split("\0")[:-1] if data else None


def server_command(path: str, argv: tuple[str, ...], env: dict[str, str] | None = None,
                   work: Path | None = None) -> ServerCommand | NotAServerCommand:
    """Find llama-server in [path, *argv]; `env` and `sh -c 'exec? simple command'` are looked through.
    With the program's environment and a folder to work in, a bash program (variables, tests,
    `$(...)`) is run by the real bash up to its `exec` (run_shell_program)."""
    words = [path, *argv]
    while words:
        program = _basename(words[0])
        if program == "env":
            words = _unwrap_env(words)
            continue
        if program in _SHELLS:
            index = 1
            while index < len(words) and words[index].startswith("-") and words[index] != "-":
                index += 1
            options, rest = words[1:index], words[index:]
            runs_string = any(not o.startswith("--") and "c" in o[1:] for o in options)
            if not runs_string or not rest:
                target = rest[0] if rest else program
                return NotAServerCommand(f"{program} runs the script {target}", (program, _basename(target)))
            script = rest[0]
            ran = run_shell_program(words[0], options, script, env, work) if env is not None and work else None
            if ran:
                words = ran
                continue
            if _SHELL_SYNTAX.search(script):
                return NotAServerCommand(f"{program} -c runs a shell program, not one command", (program, "shell"))
            try:
                inner = shlex.split(script)
            except ValueError:
                return NotAServerCommand(f"{program} -c script does not parse", (program, "shell"))
            words = inner[1:] if inner[:1] == ["exec"] else inner
            continue
        break
    for index, word in enumerate(words):
        if _SERVER_NAME.search(_basename(word)):
            return ServerCommand(tuple(words[:index]), word, tuple(words[index + 1:]))
    target = words[0] if words else path
    return NotAServerCommand(f"{target} is not llama-server and has no llama-server command line",
                             (_basename(target),))


def read_aliases(binary: Path) -> Aliases:
    """Parse `binary --help`: option lines start at column 0 with comma-separated names.

    A group like `-kvo, --kv-offload, -nkvo, --no-kv-offload` holds a flag and its negation: the
    negative names (from the first `--no-`/`-no-` name, and the short names right before it that
    follow a long name) get their own canonical spelling. A placeholder after one space (`N`,
    `FNAME`, `[on|off|auto]`) means the option takes a value.
    """
    text = subprocess.run([str(binary), "--help"], capture_output=True, text=True, timeout=60, check=False,
                          env={"LLAMA_LOG_COLORS": "off", "PATH": "/usr/bin:/bin"})
    canonical: dict[str, str] = {}
    takes_value: dict[str, bool] = {}
    for line in (text.stdout + text.stderr).splitlines():
        match = _NAMES.match(line)
        if not match or line.startswith("---"):
            continue
        names = [n.strip() for n in match.group(1).split(",")]
        rest = line[match.end():]
        has_value = bool(re.match(r" \S", rest))
        first_negative = next((i for i, n in enumerate(names) if n.startswith(("--no-", "-no-"))), len(names))
        while (first_negative > 0 and not names[first_negative - 1].startswith("--")
               and any(n.startswith("--") for n in names[:first_negative - 1])):
            first_negative -= 1
        for group, value in ((names[:first_negative], has_value), (names[first_negative:], False)):
            if not group:
                continue
            long_names = [n for n in group if n.startswith("--")]
            name = long_names[0] if long_names else group[0]
            for spelling in group:
                canonical.setdefault(spelling, name)
                takes_value.setdefault(spelling, value)
    if not canonical:
        raise AssertionError(f"{binary} --help listed no options")
    return Aliases(canonical, takes_value)


def _is_flag(token: str) -> bool:
    if not token.startswith("-") or token == "-":
        return False
    try:
        float(token)
    except ValueError:
        return True
    return False


def flag_pairs(args: tuple[str, ...], aliases: Aliases) -> list[tuple[str | None, str | None]]:
    """(canonical flag, value) pairs; flags unknown to the reference binary take the next non-flag word."""
    pairs: list[tuple[str | None, str | None]] = []
    index = 0
    while index < len(args):
        token = args[index]
        if not _is_flag(token):
            pairs.append((None, token))
            index += 1
            continue
        name, has_inline, inline = token.partition("=")
        if has_inline and name.startswith("--"):
            pairs.append((aliases.canon(name), inline))
            index += 1
            continue
        known = aliases.takes_value.get(token)
        wants = known if known is not None else (index + 1 < len(args) and not _is_flag(args[index + 1]))
        if wants and index + 1 < len(args):
            pairs.append((aliases.canon(token), args[index + 1]))
            index += 2
        else:
            pairs.append((aliases.canon(token), None))
            index += 1
    return pairs


def _value_key(value: str | None) -> str | None:
    """Numbers compare by value (llama-server parses `1.00` and `1.0` alike); anything else byte for byte."""
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        return value
    return repr(number) if math.isfinite(number) else value


def model_ids(pairs: list[tuple[str | None, str | None]]) -> set[str]:
    """The ids llama-server reports in /v1/models when no --alias is given: the model's file name or Hub repo."""
    ids: set[str] = set()
    for flag, value in pairs:
        if value and flag in ("--model", "--hf-repo"):
            name = value.rsplit("/", 1)[-1] if flag == "--model" else value
            ids |= {name, name.removesuffix(".gguf"), value}
    return ids


def compare_args(original: tuple[str, ...], rendered: tuple[str, ...], aliases: Aliases) -> list[str]:
    """Differences between two llama-server argument lists as multisets of (flag, value) pairs.

    The render may add what llama-server does anyway when a flag is absent: `--host 127.0.0.1`,
    `--port 8080`, `--alias` equal to the id llama-server reports (the model file's name).
    """
    before = flag_pairs(original, aliases)
    after = flag_pairs(rendered, aliases)
    have = Counter((flag, _value_key(value)) for flag, value in before)
    got = Counter((flag, _value_key(value)) for flag, value in after)
    present = {flag for flag, _ in before}
    defaults = {("--host", "127.0.0.1"), ("--port", _value_key("8080"))}
    defaults |= {("--alias", name) for name in model_ids(before)}
    problems = [f"lost {flag or ''} {value if value is not None else ''}".rstrip() for (flag, value), n
                in (have - got).items() for _ in range(n)]
    for (flag, value), n in (got - have).items():
        if flag not in present and (flag, value) in defaults:
            continue
        problems += [f"added {flag or ''} {value if value is not None else ''}".rstrip()] * n
    return problems
