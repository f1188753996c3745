"""Find the llama-server command inside the wrappers real units put around it.

Imported: `/usr/bin/env [-i] [VAR=value ...] llama-server ...` and `bash|sh -c|-lc 'SCRIPT'` whose
script ends in a llama-server command that can be known before the unit starts (specd/unit/shell.py
follows it without running it). Refused, naming the wrapper: a
container (`docker|podman run ... IMAGE llama-server ...`: the profile would have to manage the
image, devices and the published port, which specd does not do — run llama-server natively, or
keep the unit by hand) and a script with no llama-server arguments (specd cannot see into it).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path, PurePath

from specd.engines.facts import is_vllm_serve
from specd.errors import UsageError
from specd.profiles.keys import BY_FLAG
from specd.unit.shell import script_command
from specd.unit.syntax import read_unit_text

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


def _read_sourced(path: str) -> str | None:
    """A file a wrapper script sources, as the shell would find it when the unit starts (None: absent)."""
    file = Path(path)
    return read_unit_text(file) if file.is_file() else None


def unwrap(argv: list[str], environment: dict[str, str], where: str, *,
           manager_environment: dict[str, str] | None = None) -> Unwrapped:
    """The llama-server argv inside `argv`; refuses wrappers specd cannot carry, naming them.

    manager_environment: what the service manager itself gives every service (HOME, USER of a
    user unit); a shell script may use it, the profile does not need to carry it."""
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
            script_index = next((i for i, a in enumerate(argv) if i > 0 and not a.startswith("-")), None)
            flags = argv[1:script_index]  # the shell's own options come before its script
            if script_index is None or not any("c" in f for f in flags if not f.startswith("--")):
                what = f"the script {argv[script_index]}" if script_index is not None else "no script"
                raise UsageError(f"{where}: ExecStart= runs the shell {argv[0]} with {what}, not -c 'command': specd "
                                 "cannot see into a script file; write the llama-server command it runs into "
                                 "ExecStart= directly, then import")
            script = script_command(argv[script_index], {**(manager_environment or {}), **environment, **env},
                                    where, read_source=_read_sourced)
            notes.extend([f"unwrapped `{argv[0]} {' '.join(flags)}`: imported the llama-server command of its script",
                          *script.notes])
            if any("l" in flag for flag in flags if not flag.startswith("--")) or "--login" in flags:
                notes.append("a login shell also reads /etc/profile and ~/.profile first: specd did not follow them")
            env.update(script.exported)
            if script.exported:
                notes.append(f"the script exports {', '.join(sorted(script.exported))}: they go to [env]")
            argv = script.argv
            continue
        break
    return _server_command(argv, env, notes, where)


def _server_command(argv: list[str], env: dict[str, str], notes: list[str], where: str) -> Unwrapped:
    """What is left after env and shells: a container (refused), a launcher around llama-server, or it."""
    program = PurePath(argv[0]).name
    if is_vllm_serve(argv):  # vLLM's own command line, a launcher in front kept (specd.unit.vllm_import)
        return Unwrapped(argv, env, tuple(notes))
    if program in CONTAINERS:
        raise UsageError(f"{where}: it runs llama-server in a container ({program} "
                         f"{argv[1] if len(argv) > 1 else ''}): specd manages a native llama-server process and "
                         "does not manage images, devices or published ports; run llama-server natively under "
                         "systemd and import that unit, or keep this unit by hand")
    server_at = next((i for i, word in enumerate(argv) if i > 0 and is_llama_server(word)), None)
    if not is_llama_server(argv[0]) and server_at is not None:
        launcher = tuple(argv[:server_at])
        notes.append(f"`{' '.join(launcher)}` is kept as the launcher in front of llama-server "
                     "(profile key 'launcher')")
        return Unwrapped(argv[server_at:], env, tuple(notes), launcher)
    if len(argv) == 1 and not is_llama_server(argv[0]):
        raise UsageError(f"{where}: ExecStart= runs {argv[0]} with no arguments, a wrapper script specd cannot "
                         "see into; write the llama-server command it runs into ExecStart= (or a copy of the unit) "
                         "and import that")
    if not is_llama_server(argv[0]) and not any(arg.split("=", 1)[0] in BY_FLAG for arg in argv[1:]):
        raise UsageError(f"{where}: ExecStart= runs {_shown(argv)}: neither the program's name nor its "
                         "arguments are llama-server's, so it is a wrapper specd cannot see into; write the "
                         "llama-server command it runs into ExecStart= (or a copy of the unit) and import that")
    if not is_llama_server(argv[0]):
        notes.append(f"{argv[0]} is taken as the llama-server binary (its name does not say so)")
    return Unwrapped(argv, env, tuple(notes))


def _shown(argv: list[str], limit: int = 200) -> str:
    """The command for a message: whole words, the program's full path always, long argument lists cut."""
    text = shlex.join(argv)
    if len(text) <= limit:
        return text
    kept = [argv[0]]
    for word in argv[1:]:
        if len(shlex.join([*kept, word])) > limit - 4:
            break
        kept.append(word)
    return shlex.join(kept) + " ..."
