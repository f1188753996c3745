"""Find the llama-server command inside the wrappers real units put around it.

Imported: `/usr/bin/env [-i] [VAR=value ...] llama-server ...` and `bash|sh -c|-lc 'exec llama-server
...'` whose script is one command (optionally after `cd DIR &&`). Refused, naming the wrapper: a
container (`docker|podman run ... IMAGE llama-server ...`: the profile would have to manage the
image, devices and the published port, which specd does not do — run llama-server natively, or
keep the unit by hand) and a script with no llama-server arguments (specd cannot see into it).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import PurePath

from specd.errors import UsageError

SHELLS = frozenset({"bash", "sh", "dash", "zsh"})
CONTAINERS = frozenset({"docker", "podman", "nerdctl"})


@dataclass(frozen=True)
class Unwrapped:
    argv: list[str]
    environment: dict[str, str]  # VAR=value set by the wrapper (env, a shell's `export`)
    notes: tuple[str, ...]
    launcher: tuple[str, ...] = ()  # kept in front of llama-server: toolbox run -c BOX, numactl ..., nice ...


def is_llama_server(program: str) -> bool:
    """llama-server itself (also a renamed build such as llama-server-cuda), never a script around it."""
    name = PurePath(program).name
    if name.endswith((".sh", ".bash", ".py")) or "start" in name or "wrapper" in name:
        return False
    return name == "server" or re.fullmatch(r"(ik[-_])?llama[-_]server([-_.][\w.]+)?", name) is not None


def _shell_script(script: str, where: str, environment: dict[str, str]) -> tuple[list[str], list[str]]:
    notes: list[str] = []
    try:
        lexer = shlex.shlex(script, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError as exc:
        raise UsageError(f"{where}: cannot read the shell script {script[:80]!r}: {exc}") from exc
    commands: list[list[str]] = [[]]
    for token in tokens:
        if token in ("&&", ";"):
            commands.append([])
        elif token in ("|", "||", "&", "|&"):
            raise UsageError(f"{where}: the shell script runs more than one llama-server command ({token!r}): "
                             "write the llama-server command into ExecStart= directly, then import")
        else:
            commands[-1].append(token)
    commands = [c for c in commands if c]
    for command in commands[:-1]:
        if command[0] == "cd" and len(command) == 2:
            notes.append(f"the script's `cd {command[1]}` becomes WorkingDirectory= ... not carried: "
                         "relative paths in the command are kept as written")
        elif command[0] == "export" or all(re.fullmatch(r"[A-Za-z_]\w*=.*", w) for w in command):
            for word in command[1:] if command[0] == "export" else command:
                name, _, value = word.partition("=")
                environment[name] = value
        else:
            raise UsageError(f"{where}: the shell script runs {' '.join(command)[:60]!r} before llama-server; "
                             "specd imports one llama-server command: move the rest to ExecStartPre=")
    last = commands[-1] if commands else []
    if last and last[0] == "exec":
        last = last[1:]
    expanded: list[str] = []
    for word in last:
        unresolved = re.findall(r"\$\{?([A-Za-z_]\w*)\}?", word)
        missing = [name for name in unresolved if name not in environment]
        if missing:
            raise UsageError(f"{where}: the shell script uses ${missing[0]}, which neither the unit nor the script "
                             "sets; specd cannot tell its value (set it with Environment=)")
        value = re.sub(r"\$\{?([A-Za-z_]\w*)\}?", lambda m: environment[m.group(1)], word)
        expanded.extend(value.split() if re.fullmatch(r"\$\{?[A-Za-z_]\w*\}?", word) else [value])
    return expanded, notes


def unwrap(argv: list[str], environment: dict[str, str], where: str) -> Unwrapped:
    """The llama-server argv inside `argv`; refuses wrappers specd cannot carry, naming them."""
    notes: list[str] = []
    env: dict[str, str] = {}
    for _ in range(3):  # env inside bash -c inside env is as deep as real units go
        program = PurePath(argv[0]).name
        if program == "env":
            rest = argv[1:]
            while rest and (rest[0].startswith("-") or "=" in rest[0]):
                if "=" in rest[0] and not rest[0].startswith("-"):
                    name, _, value = rest[0].partition("=")
                    env[name] = value
                rest = rest[1:]
            if not rest:
                raise UsageError(f"{where}: ExecStart= runs `env` with no command")
            notes.append(f"unwrapped {argv[0]}" + (f" (its {', '.join(sorted(env))} go to [env])" if env else ""))
            argv = rest
            continue
        if program in SHELLS:
            flags = [a for a in argv[1:] if a.startswith("-")]
            script_index = next((i for i, a in enumerate(argv) if i > 0 and not a.startswith("-")), None)
            if script_index is None or not any("c" in f for f in flags):
                raise UsageError(f"{where}: ExecStart= runs the shell {argv[0]} without -c 'command': specd cannot "
                                 "see the llama-server command; put it in ExecStart= directly")
            inner, script_notes = _shell_script(argv[script_index], where, {**environment, **env})
            notes.extend([f"unwrapped `{argv[0]} {' '.join(flags)}`: imported the llama-server command of its script",
                          *script_notes])
            if not inner:
                raise UsageError(f"{where}: the shell script has no command")
            argv = inner
            continue
        break
    return _server_command(argv, env, notes, where)


def _server_command(argv: list[str], env: dict[str, str], notes: list[str], where: str) -> Unwrapped:
    """What is left after env and shells: a container (refused), a launcher around llama-server, or it."""
    program = PurePath(argv[0]).name
    if program in CONTAINERS:
        raise UsageError(f"{where}: it runs llama-server in a container ({program} "
                         f"{argv[1] if len(argv) > 1 else ''}): specd manages a native llama-server process and "
                         "does not manage images, devices or published ports; run llama-server natively under "
                         "systemd and import that unit, or keep this unit by hand")
    server_at = next((i for i, word in enumerate(argv) if i > 0 and is_llama_server(word)), None)
    if not is_llama_server(argv[0]) and server_at is not None:
        launcher = tuple(argv[:server_at])
        notes.append(f"`{' '.join(launcher)}` is kept as the launcher in front of llama-server (profile key 'launcher')")
        return Unwrapped(argv[server_at:], env, tuple(notes), launcher)
    if len(argv) == 1 and not is_llama_server(argv[0]):
        raise UsageError(f"{where}: ExecStart= runs {argv[0]} with no arguments, a wrapper script specd cannot "
                         "see into; write the llama-server command it runs into ExecStart= (or a copy of the unit) "
                         "and import that")
    if not is_llama_server(argv[0]):
        notes.append(f"{argv[0]} is taken as the llama-server binary (its name does not say so)")
    return Unwrapped(argv, env, tuple(notes))
