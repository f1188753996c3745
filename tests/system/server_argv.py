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

# llama-server, a fork's or a build's renamed copy (ik_llama-server, beellama-server, llama-server-rocm,
# llama-server.exe, ...; not a script such as llama-server.sh), or `server`: llama.cpp's
# name for the same program until June 2024 (units of old builds still run it). llama.cpp's multi-call
# `llama` runs it as `llama serve` (or `llama server`: app/llama.cpp).
_SERVER_NAME = re.compile(r"llama[-_]server([-_][\w.]+|\.exe)?$|^server$")
_SCRIPT_NAME = re.compile(r"\.(sh|bash|py)$|wrapper|start")
_SUBCOMMAND_HOST = "llama"
_SUBCOMMANDS = frozenset({"serve", "server"})
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
        subcommand = words[index + 1] if index + 1 < len(words) else ""
        named = _SERVER_NAME.search(_basename(word)) and not _SCRIPT_NAME.search(_basename(word))
        if named or (_basename(word) == _SUBCOMMAND_HOST and subcommand in _SUBCOMMANDS):
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


def _spelling(token: str) -> str:
    """llama-server turns `_` into `-` in a long option before it looks it up (common/arg.cpp)."""
    return token.replace("_", "-") if token.startswith("--") else token


def flag_pairs(args: tuple[str, ...], aliases: Aliases) -> list[tuple[str | None, str | None]]:
    """(canonical flag, value) pairs; flags unknown to the reference binary take the next non-flag word.
    A word that is no option and no option's value is (None, word), in its place. An option that takes
    a value in the reference build but is followed by another option (a bare `-fa` written for an older
    build, where it was a switch) is read as a switch: the reference build would not start that command."""
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
            pairs.append((aliases.canon(_spelling(name)), inline))
            index += 1
            continue
        known = aliases.takes_value.get(_spelling(token))
        wants = (known if known is not None else True) and index + 1 < len(args) and not _is_flag(args[index + 1])
        if wants and index + 1 < len(args):
            pairs.append((aliases.canon(_spelling(token)), args[index + 1]))
            index += 2
        else:
            pairs.append((aliases.canon(_spelling(token)), None))
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


def effective(pairs: list[tuple[str | None, str | None]]) -> list[tuple[str | None, str | None]]:
    """What llama-server keeps of an option given twice: the last one (it warns "only last value will be
    used", common/arg.cpp; a switch given twice is the switch once); --spec-type adds up, so every one is
    kept. Words that are no option stay."""
    last = {flag: index for index, (flag, value) in enumerate(pairs) if flag is not None}
    return [(flag, value) for index, (flag, value) in enumerate(pairs)
            if flag is None or flag == "--spec-type" or last[flag] == index]


def served_id(pairs: list[tuple[str | None, str | None]], environment: dict[str, str]) -> str | None:
    """The id llama-server lists first in /v1/models (server-context.cpp): the first --alias, else the -hf
    repo as given, else the model path as given; a flag wins over its LLAMA_ARG_* variable. None: router mode.
    tests/system/test_served_id.py checks this against the real binary."""
    values = {flag: value for flag, value in pairs if flag is not None and value is not None}
    alias = values.get("--alias") or environment.get("LLAMA_ARG_ALIAS")
    if alias:
        return alias.split(",")[0]
    return (values.get("--hf-repo") or environment.get("LLAMA_ARG_HF_REPO")
            or values.get("--model") or environment.get("LLAMA_ARG_MODEL") or None)


def compare_args(original: tuple[str, ...], rendered: tuple[str, ...], aliases: Aliases) -> list[str]:
    """Differences between two llama-server argument lists, as llama-server reads them.

    The same options with the same values (any order: llama-server treats them as order-free; an option
    given twice counts by its last value, as llama-server keeps it), and the same words that are no
    option in the same order and the same place before the first option (a subcommand, a wrapper
    script's own arguments). Nothing added, not even what llama-server does by default.
    """
    before, after = flag_pairs(original, aliases), flag_pairs(rendered, aliases)
    problems: list[str] = []
    lead_before = [value for flag, value in before[:next((i for i, (f, _) in enumerate(before) if f), len(before))]]
    lead_after = [value for flag, value in after[:next((i for i, (f, _) in enumerate(after) if f), len(after))]]
    if lead_before != lead_after:
        problems.append(f"words before the options {lead_before} -> {lead_after}")
    words_before = [value for flag, value in before if flag is None]
    words_after = [value for flag, value in after if flag is None]
    if words_before != words_after:
        problems.append(f"words that are no option, in order: {words_before} -> {words_after}")
    have = Counter((flag, _value_key(value)) for flag, value in effective(before) if flag is not None)
    got = Counter((flag, _value_key(value)) for flag, value in effective(after) if flag is not None)
    problems += [f"lost {flag} {value if value is not None else ''}".rstrip() for (flag, value), n
                 in (have - got).items() for _ in range(n)]
    problems += [f"added {flag} {value if value is not None else ''}".rstrip() for (flag, value), n
                 in (got - have).items() for _ in range(n)]
    return problems


def command_problems(before: ServerCommand, after: ServerCommand, aliases: Aliases) -> list[str]:
    """Differences between two llama-server commands: the wrapper around it, the binary (a bare command
    name may come back as the path systemd finds it at), and the arguments as llama-server reads them."""
    problems = [f"wrapper {list(before.wrapper)} -> {list(after.wrapper)}"] if before.wrapper != after.wrapper else []
    same_binary = before.binary == after.binary or (
        not before.binary.startswith("/") and Path(after.binary).name == before.binary)
    if not same_binary:
        problems.append(f"binary {before.binary} -> {after.binary}")
    return problems + compare_args(before.args, after.args, aliases)
