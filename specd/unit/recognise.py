"""Is the program a unit runs llama-server (or a fork of it)? Asked of the program itself where it can be.

A present, non-script binary is asked (`--version`, `--help`; `llama serve --help` for llama.cpp's
multi-call `llama`): its own help says whether it is llama-server, and what each of its flags
takes. Nothing is run that might do something else: not a script (its `--help` is whatever the
script does), not through a launcher (toolbox, containers), not an interpreter. Where the binary
cannot be asked (absent from this box, a script, inside a launcher), the command is accepted by
its shape (a name that says llama-server, `llama serve`, or llama-server's flags) and the import
says that its flags could not be checked. A program that is something else — an interpreter
(`python3 -m llama_cpp.server`), another engine (`vllm serve`, `ollama serve`), or a binary whose
own help is not llama-server's — is refused, naming it.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path, PurePath

from specd.errors import SpecdError, UsageError
from specd.profiles.flags import SYSTEMD_SEARCH_PATH, BinaryFlags, binary_flags
from specd.profiles.keys import BY_FLAG

_INTERPRETERS = re.compile(r"(python|pypy)[\d.]*|node|nodejs|deno|bun|ruby|perl|java|php|Rscript|julia|uv|uvx|pipx"
                           r"|poetry|conda|mamba|micromamba")
# Engines people run beside llama-server, whose own command lines look alike.
_OTHER_ENGINES = {"vllm": "vLLM", "ollama": "Ollama", "koboldcpp": "KoboldCpp", "llamafile": "llamafile",
                  "text-generation-launcher": "TGI", "sglang": "SGLang", "lms": "LM Studio", "tabbyAPI": "TabbyAPI",
                  "llama-cpp-python": "llama-cpp-python", "local-ai": "LocalAI", "lemonade-server": "Lemonade",
                  "mlx_lm.server": "MLX LM", "mlx_lm": "MLX LM", "mlx-lm": "MLX LM",
                  "sd-server": "stable-diffusion.cpp", "whisper-server": "whisper.cpp"}
_SERVER_NAME = re.compile(r"(.*[-_])?llama[-_]?server([-_.][\w.]+)?|server")
SUBCOMMANDS = frozenset({"serve", "server"})  # llama.cpp's multi-call `llama` (app/llama.cpp): both run the server


@dataclass(frozen=True)
class ServerProgram:
    """What is known of the program: its flags when it was asked, and how it was recognised."""

    flags: BinaryFlags | None  # None: it could not be asked (absent, a script, behind a launcher)
    how: str  # for the import's report: what said it is llama-server, or why its flags are unchecked

    @property
    def checked(self) -> bool:
        return self.flags is not None


def looks_like_server(program: str, binary_args: tuple[str, ...] = ()) -> bool:
    """Named as llama-server or a fork of it (beellama-server, ik_llama-server, llama-server-cuda, the
    old `server`), or llama.cpp's `llama serve`; never a script's name (start.sh, run_server.py)."""
    name = PurePath(program).name
    if name.endswith((".sh", ".bash", ".py")) or "start" in name or "wrapper" in name:
        return False
    if name == "llama":
        return bool(binary_args) and binary_args[0] in SUBCOMMANDS
    return _SERVER_NAME.fullmatch(name) is not None


def refuse_other_programs(argv: list[str], where: str) -> None:
    """An interpreter or another engine in ExecStart=: refused, naming what it runs."""
    name = PurePath(argv[0]).name
    if _INTERPRETERS.fullmatch(name):
        module = argv[argv.index("-m") + 1] if "-m" in argv[:-1] else None
        script = next((word for word in argv[1:] if not word.startswith("-")), None)
        what = f"the {name} module {module}" if module else f"the {name} program {script}" if script else name
        known = " (llama-cpp-python's server)" if module and module.startswith("llama_cpp") else ""
        raise UsageError(f"{where}: its command runs {what}{known}, not llama.cpp's llama-server: specd manages "
                         "llama-server (or a fork of it) only; keep this unit by hand, or run llama-server and "
                         "import that unit")
    if name in _OTHER_ENGINES:
        raise UsageError(f"{where}: its command runs {name} ({_OTHER_ENGINES[name]}), not llama.cpp's llama-server: "
                         "specd manages llama-server (or a fork of it) only; keep this unit by hand")
    if looks_like_server(argv[0], tuple(argv[1:2])):
        return
    for index, word in enumerate(argv[1:], 1):  # a gate or launcher that runs another program after its options
        inner = argv[index + 1:] if word == "--" else argv[index:]
        inner_name = PurePath(inner[0]).name if inner else ""
        if inner and (word == "--" or _INTERPRETERS.fullmatch(inner_name) or inner_name in _OTHER_ENGINES) \
                and not looks_like_server(inner[0], tuple(inner[1:2])):
            shown = " ".join(inner[:3])
            raise UsageError(f"{where}: its command runs {name}, which runs {shown} ...: not llama.cpp's "
                             "llama-server, so specd cannot manage it; keep this unit by hand")


def _found(program: str) -> Path | None:
    if program.startswith("/"):
        path = Path(program)
    else:
        located = next((Path(d) / program for d in SYSTEMD_SEARCH_PATH.split(":") if (Path(d) / program).is_file()),
                       None)
        if located is None:
            return None
        path = located
    return path if path.is_file() and os.access(path, os.X_OK) else None


def _is_script(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            return handle.read(2) == b"#!"
    except OSError:
        return True


def _version(path: Path, binary_args: tuple[str, ...]) -> str:
    """The first line of `--version` that names a version (llama.cpp: `version: 7890 (abc1234)`)."""
    command = [str(path), "version"] if binary_args else [str(path), "--version"]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False,
                                env={**os.environ, "LLAMA_LOG_COLORS": "off"})
    except (OSError, subprocess.TimeoutExpired):
        return ""
    lines = (result.stdout + result.stderr).splitlines()
    return next((line.strip() for line in lines if line.strip().startswith("version")), "")


def is_server_help(flags: BinaryFlags) -> bool:
    """llama-server's own options (the server section of llama.cpp's common arguments): a model, a
    host and a port. llama-cli, python, a shell answer --help without them."""
    return (flags.has("--port") and flags.has("--host") and (flags.has("--model") or flags.has("-m"))) or (
        flags.has("--port") and flags.has("--model") and flags.has("--alias"))


def recognise(argv: list[str], binary_args: tuple[str, ...], launcher: tuple[str, ...], where: str) -> ServerProgram:
    """Ask the program what it is where that is safe; refuse what is not llama-server, naming it."""
    program = argv[0]
    refuse_other_programs(argv, where)
    shaped = looks_like_server(program, binary_args) or any(a.split("=", 1)[0] in BY_FLAG for a in argv[1:])
    if launcher:
        return ServerProgram(None, f"{program} runs inside `{' '.join(launcher)}`: specd did not ask it here, so "
                                   "its flags could not be checked (preflight asks it there before a switch)")
    path = _found(program)
    if path is None:
        if not shaped:
            raise UsageError(f"{where}: ExecStart= runs {program}, which is not on this box and neither its name "
                             "nor its arguments are llama-server's; specd cannot tell what it runs: import the "
                             "unit on the box that has it, or write the llama-server command into ExecStart=")
        return ServerProgram(None, f"{program} is not on this box: taken as llama-server by "
                                   f"{'its name' if looks_like_server(program, binary_args) else 'its flags'}; "
                                   "its flags could not be checked (value or switch: specd's own table; "
                                   "preflight asks the binary before a switch)")
    if _is_script(path):
        return ServerProgram(None, f"{path} is a script: specd does not run it to ask what it is, so its flags "
                                   "could not be checked; the words it is given are kept as written")
    try:
        flags = binary_flags(path, (), binary_args)
    except SpecdError as error:
        raise UsageError(f"{where}: {program} {' '.join(binary_args)} --help did not answer as llama-server does "
                         f"({error}): specd manages llama-server (or a fork of it) only") from None
    if not is_server_help(flags):
        asked = " ".join([program, *binary_args, "--help"])
        raise UsageError(f"{where}: ExecStart= runs {program}, and `{asked}` lists no llama-server options "
                         "(--model, --host, --port): it is not llama-server (or a fork of it), which is all "
                         "specd manages; keep this unit by hand")
    version = _version(path, binary_args)
    return ServerProgram(flags, f"{path} {' '.join(binary_args)}".rstrip() + " answers --help as llama-server"
                                + (f" ({version})" if version else "") + ": its flags are checked against its --help")
