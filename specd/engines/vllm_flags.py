"""What an installed vLLM accepts, asked of it: `vllm serve --help=all`, and its SpeculativeConfig.

vLLM adds and renames options every release (`--spec-method` and the speculative methods it lists,
`num_speculative_tokens_per_batch_size` inside `--speculative-config`), so specd never keeps a table
of them: the flags and their choices come from `vllm serve --help=all` (argparse's layout: two spaces,
the spellings separated by ", ", each with its metavar or `{choices}`), and the keys `--speculative-config`
takes from the environment's own `vllm.config.SpeculativeConfig`, run by the interpreter the `vllm`
script starts with (its `#!` line). Both take seconds (vLLM imports torch), so the answer is cached
under specd's cache dir, keyed by the script's bytes and the vllm distributions installed beside it
(an upgrade changes their names).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from specd import paths
from specd.errors import PreflightError
from specd.profiles.flags import check_executable, resolve_binary

CACHE_FORMAT = 1
HELP_TIMEOUT_S = 180.0  # `vllm serve --help=all` imports torch and vLLM: 13 s on an idle 2-core box
_OPTION_LINE = re.compile(r"^  (-\S.*)$")
_CHOICES = re.compile(r"\{([^}]*)\}")
_VERSION = re.compile(r"docs\.vllm\.ai/en/v(\d[\w.+-]*)/")
_SPEC_KEYS_SCRIPT = ("import dataclasses, json\n"
                     "from vllm.config import SpeculativeConfig\n"
                     "print(json.dumps([f.name for f in dataclasses.fields(SpeculativeConfig) if f.init]))\n")


@dataclass(frozen=True)
class VllmFlags:
    """The options of one installed `vllm serve`."""

    binary: str
    groups: tuple[tuple[str, ...], ...]  # the spellings of each option
    valued: frozenset[str] = frozenset()  # spellings that take a value
    choices: tuple[tuple[str, tuple[str, ...]], ...] = ()  # option -> the values its --help lists
    speculative_keys: tuple[str, ...] | None = None  # SpeculativeConfig's fields; None: could not ask
    version: str | None = None

    def has(self, flag: str) -> bool:
        name = flag.split("=", 1)[0]
        if name.startswith("--") and "." in name:  # --speculative-config.method: a key of a JSON option
            name = name.split(".", 1)[0]
        return any(name in group for group in self.groups)

    def canonical(self, flag: str) -> str:
        name = flag.split("=", 1)[0].split(".", 1)[0] if flag.startswith("--") else flag.split("=", 1)[0]
        for group in self.groups:
            if name in group:
                return group[0]
        return name

    def choices_of(self, flag: str) -> tuple[str, ...]:
        wanted = self.canonical(flag)
        return next((values for option, values in self.choices if option == wanted), ())

    @property
    def speculative_methods(self) -> tuple[str, ...]:
        """The methods `--spec-method` lists (empty: this vLLM's --help names none; it judges at start)."""
        return tuple(m for m in self.choices_of("--spec-method") if m != "None")


def parse_serve_help(binary: str, text: str) -> VllmFlags:
    """argparse's help: an option line is two spaces and a dash; its spellings come before the first
    run of two spaces, separated by ", "; a spelling followed by a metavar or `{choices}` takes a value."""
    groups: list[tuple[str, ...]] = []
    valued: set[str] = set()
    choices: list[tuple[str, tuple[str, ...]]] = []
    for line in text.splitlines():
        match = _OPTION_LINE.match(line)
        if not match:
            continue
        invocation = re.split(r"\s{2,}", match.group(1), maxsplit=1)[0]
        names: list[str] = []
        for part in invocation.split(", "):
            words = part.split()
            if not words or not words[0].startswith("-"):
                continue
            names.append(words[0])
            if len(words) > 1:
                valued.add(words[0])
                listed = _CHOICES.search(part)
                if listed and not choices_known(choices, names[0]):
                    choices.append((names[0], tuple(v for v in listed.group(1).split(",") if v)))
        if names:
            groups.append(tuple(names))
    if not any("--served-model-name" in group for group in groups):
        raise PreflightError(f"{binary} serve --help=all lists no --served-model-name; is this vLLM's `vllm` "
                             "command?")
    version = _VERSION.search(text)
    return VllmFlags(binary, tuple(groups), frozenset(valued), tuple(choices),
                     version=version.group(1) if version else None)


def choices_known(choices: list[tuple[str, tuple[str, ...]]], option: str) -> bool:
    return any(name == option for name, _ in choices)


def interpreter_of(script: Path) -> Path | None:
    """The Python a console script runs with: its `#!` line, when that names an interpreter's path."""
    try:
        with script.open("rb") as handle:
            first = handle.readline(4096).decode("utf-8", "replace").strip()
    except OSError:
        return None
    if not first.startswith("#!"):
        return None
    words = first[2:].split()
    return Path(words[0]) if words and "python" in Path(words[0]).name and Path(words[0]).is_absolute() else None


def _fingerprint(script: Path, interpreter: Path | None) -> str | None:
    """The script's bytes and the names of the vllm distributions beside its interpreter; None when
    the environment cannot be seen (then vLLM is asked every time)."""
    if interpreter is None:
        return None
    lib = interpreter.parent.parent / "lib"
    dists = sorted(str(p.name) for p in lib.glob("python3*/site-packages/vllm*.dist-info"))
    if not dists:
        return None
    digest = hashlib.sha256(script.read_bytes())
    digest.update("\0".join(dists).encode())
    return digest.hexdigest()


def _ask(command: list[str], what: str, timeout_s: float) -> str:
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False,
                                env={**os.environ, "VLLM_LOGGING_LEVEL": "ERROR"})
    except FileNotFoundError:
        raise PreflightError(f"{command[0]}: no such binary ({what})") from None
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PreflightError(f"`{' '.join(command)}` failed: {exc}") from exc
    if result.returncode != 0:
        last = [line for line in (result.stderr or result.stdout).splitlines() if line.strip()][-1:]
        raise PreflightError(f"`{' '.join(command)}` exited with status {result.returncode}"
                             + (f": {last[0].strip()}" if last else ""),
                             hint="the profile's environment has no working vLLM; run the command by hand to see why")
    return result.stdout


def _speculative_keys(interpreter: Path | None) -> tuple[str, ...] | None:
    if interpreter is None:
        return None
    try:
        return tuple(json.loads(_ask([str(interpreter), "-c", _SPEC_KEYS_SCRIPT], "SpeculativeConfig",
                                     HELP_TIMEOUT_S).strip().splitlines()[-1]))
    except (PreflightError, ValueError, IndexError):
        return None


def vllm_flags(binary: Path, launcher: tuple[str, ...] = ()) -> VllmFlags:
    """Ask the installed vLLM (cached per installation). With a launcher, vLLM lives where the launcher
    runs it: its --help is asked there, and its SpeculativeConfig is not (no interpreter to run)."""
    if launcher:
        return parse_serve_help(str(binary), _ask([*launcher, str(binary), "serve", "--help=all"],
                                                  f"the launcher in front of {binary}", HELP_TIMEOUT_S))
    resolved = resolve_binary(binary)
    try:
        check_executable(resolved)
    except PreflightError as exc:
        raise PreflightError(f"{exc.message}: the profile's environment has no vllm") from None
    interpreter = interpreter_of(resolved)
    digest = _fingerprint(resolved, interpreter)
    cache_file = paths.cache_dir() / "flags" / f"vllm-{digest}.json" if digest else None
    if cache_file is not None:
        try:
            cached = json.loads(cache_file.read_text())
            if cached.get("format") == CACHE_FORMAT:
                return VllmFlags(str(resolved), tuple(tuple(g) for g in cached["groups"]),
                                 frozenset(cached["valued"]), tuple((o, tuple(v)) for o, v in cached["choices"]),
                                 tuple(cached["speculative_keys"]) if cached["speculative_keys"] is not None
                                 else None, cached["version"])
        except (OSError, ValueError, KeyError):
            pass
    flags = parse_serve_help(str(resolved), _ask([str(resolved), "serve", "--help=all"], "the profile's `binary`",
                                                 HELP_TIMEOUT_S))
    flags = VllmFlags(flags.binary, flags.groups, flags.valued, flags.choices, _speculative_keys(interpreter),
                      flags.version)
    if cache_file is not None:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache_file.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps({"format": CACHE_FORMAT, "groups": flags.groups, "valued": sorted(flags.valued),
                                   "choices": flags.choices, "speculative_keys": flags.speculative_keys,
                                   "version": flags.version}))
        os.replace(tmp, cache_file)
    return flags
