"""What a llama-server binary accepts, read from its own `--help`, cached by the binary's sha256.

Forks and versions differ (vanilla llama.cpp spells MTP `draft-mtp`, May-2026 builds `mtp`, the
BeeLlama fork `dflash`), so specd never assumes a flag: it asks the binary.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

from specd import paths
from specd.errors import PreflightError

SPEC_TYPE_SPELLINGS: dict[str, tuple[str, ...]] = {
    "draft": ("draft-simple", "draft"),
    "mtp": ("draft-mtp", "mtp"),
    "dflash": ("draft-dflash", "dflash"),
    "eagle3": ("draft-eagle3", "eagle3"),
    "dspark": ("draft-dspark", "dspark"),
}
# An option line: llama.cpp prints it at column 0; ik_llama.cpp indents it by 2 ("  -md,   --model-draft")
# or 9 ("         --spec-autotune"). Description lines are indented 34 (ik_llama.cpp) or 40 (llama.cpp).
_OPTION_LINE = re.compile(r"^ {0,12}-")
_SPLIT = re.compile(r"[,\s]+")
_NAMES = re.compile(r"^ {0,12}(-[\w-]+(?:,\s*-[\w-]+)*)")
_TYPES_LINE = re.compile(r"\btypes: ([\w-]+(?:, [\w-]+)+)")  # ik_llama.cpp: "types: none, draft, dflash, mtp, ..."
_ENV_NOTE = re.compile(r"\(env: (LLAMA_ARG_\w+)\)")
_DEFAULT = re.compile(r"\(default:\s*([^)]*)\)")
CACHE_FORMAT = 5  # bumped when parsing changes: cached flags are read afresh


@dataclass(frozen=True)
class BinaryFlags:
    """The option groups of one binary: each group is the set of spellings of one option."""

    binary: str
    groups: tuple[tuple[str, ...], ...]
    spec_types: tuple[str, ...]
    valued: frozenset[str] = frozenset()  # spellings that take a value in this build
    env_names: tuple[tuple[str, str], ...] = ()  # (LLAMA_ARG_..., the option's first spelling)
    spec_default: tuple[str, ...] = ()  # speculative types this build runs when told nothing (its --help says)
    defaults: tuple[tuple[str, str], ...] = ()  # (an option's first spelling, the `(default: ...)` its --help says)

    def default_of(self, flag: str) -> str | None:
        """What this build does when the option is not given, as its --help words it; None when it does not say."""
        return dict(self.defaults).get(self.canonical(flag))

    def speculation_off(self) -> list[str]:
        """The arguments that turn every speculator off: none on a build that speculates only when told to.

        llama.cpp is moving to speculation on by default (ggml-org/llama.cpp PR #28391: `ngram-mod` by
        default, `--spec-type` adds to it, `--no-spec-type TYPES` removes); a profile with type = "none"
        must still decode autoregressively there."""
        if not self.spec_default:
            return []
        if self.has("--no-spec-type"):
            return ["--no-spec-type", ",".join(self.spec_default)]
        return ["--spec-type", "none"]

    def takes_value(self, flag: str) -> bool | None:
        """Whether this build's flag takes a value; None when the build does not know the flag."""
        return (flag in self.valued) if self.has(flag) else None

    def setting_of(self, variable: str) -> str | None:
        """The option an environment variable sets (llama-server reads LLAMA_ARG_* like flags)."""
        return dict(self.env_names).get(variable)

    def variable_of(self, flag: str) -> str:
        """The LLAMA_ARG_* variable this build reads for an option: its --help names it; llama.cpp's
        convention (the long name, upper case) when this build's --help names none."""
        wanted = self.canonical(flag)
        named = [variable for variable, option in self.env_names if self.canonical(option) == wanted]
        return named[0] if named else conventional_variable(flag)

    def has(self, flag: str) -> bool:
        return any(flag in group for group in self.groups)

    def canonical(self, flag: str) -> str:
        name = flag.split("=", 1)[0]
        for group in self.groups:
            if name in group:
                return group[0]
        return name

    def spec_type_spelling(self, specd_type: str, *, profile_name: str) -> str:
        """The binary's spelling of a speculative type. A chain (`draft-dflash,ngram-mod`) is spelled
        part by part; `name:param=value` parameters (ik_llama.cpp) are kept; a name that is not one
        of specd's own goes to the binary as written (a fork may know it even if --help does not list it)."""
        if not self.has("--spec-type"):
            raise PreflightError(
                f"profile '{profile_name}': {self.binary} has no --spec-type option; "
                "it is too old for speculative decoding by type"
            )
        return ",".join(self._spell_part(part, profile_name) for part in specd_type.split(","))

    def _spell_part(self, part: str, profile_name: str) -> str:
        name, colon, params = part.partition(":")
        if "=" in name or name in self.spec_types:
            return part  # a parameter of the previous part (mtp:n_max=2,p_min=0.6), or the binary's own name
        for spelling in SPEC_TYPE_SPELLINGS.get(name, ()):
            if spelling in self.spec_types:
                return spelling + colon + params
        if not self.spec_types and name not in SPEC_TYPE_SPELLINGS:
            return part  # --help lists no types: the binary is the judge
        offered = [t for t in self.spec_types if t != "none"]
        close = difflib.get_close_matches(name, [*offered, *SPEC_TYPE_SPELLINGS], n=1, cutoff=0.6)
        hint = f" — did you mean '{close[0]}'?" if close else ""
        raise PreflightError(
            f"profile '{profile_name}': speculative type '{name}' is not offered by {self.binary}; "
            f"its --spec-type accepts {', '.join(offered) or 'nothing'}{hint}"
        )


def conventional_variable(flag: str) -> str:
    """llama.cpp's name for the variable of a long option: --models-dir is LLAMA_ARG_MODELS_DIR."""
    return "LLAMA_ARG_" + flag.lstrip("-").upper().replace("-", "_")


def parse_help(binary: str, text: str) -> BinaryFlags:
    """Option lines (column 0 in llama.cpp, indented in ik_llama.cpp) hold comma-separated names, then an
    argument placeholder."""
    groups: list[tuple[str, ...]] = []
    spec_types: tuple[str, ...] = ()
    valued: set[str] = set()
    env_names: list[tuple[str, str]] = []
    for line in text.splitlines():
        env = _ENV_NOTE.search(line)
        if env and groups:
            env_names.append((env.group(1), groups[-1][0]))
        if not _OPTION_LINE.match(line):
            continue
        names: list[str] = []
        placeholder = ""
        for token in _SPLIT.split(line.strip()):
            if token.startswith("-") and len(token) > 1 and not token[1:2].isdigit():
                names.append(token)
                continue
            placeholder = token
            break
        if not names:
            continue
        groups.append(tuple(names))
        heading = _NAMES.match(line)
        if heading and re.match(r" \S", line[heading.end():]):  # one space, then a placeholder: N, FNAME, [on|off]
            valued.update(names)
        if "--spec-type" in names:
            remainder = line.split("--spec-type", 1)[1].strip().split()
            placeholder = remainder[0] if remainder else placeholder
            spec_types = tuple(v for v in re.split(r"[,|]", placeholder.strip("[]<>{}")) if v)
    if not groups:
        raise PreflightError(f"{binary}: --help printed no options; is this a llama-server binary?")
    indented = any(_OPTION_LINE.match(line) and line.startswith(" ") for line in text.splitlines())
    if indented and not any("--alias" in group for group in groups):
        # ik_llama.cpp's layout: its argument parser takes -a/--alias (common.cpp, gpt_params_find_arg)
        # but its usage text never lists it; the alias is what the health gate asks for.
        groups.append(("-a", "--alias"))
        valued.update(("-a", "--alias"))
    if any(not re.fullmatch(r"[\w-]+", t) for t in spec_types):  # a placeholder, not a list: SPEC[:k=v,...]
        listed = _TYPES_LINE.search(_description(text, "--spec-type"))
        spec_types = tuple(re.split(r",\s*", listed.group(1))) if listed else ()
    defaults = tuple((group[0], found.group(1).strip()) for group in groups
                     if (found := _DEFAULT.search(_description(text, group[0]))))
    flags = BinaryFlags(binary=binary, groups=tuple(groups), spec_types=spec_types, valued=frozenset(valued),
                        env_names=tuple(env_names), defaults=defaults)
    return replace(flags, spec_default=_spec_default(text, flags))


def _description(text: str, option: str) -> str:
    """The words of one option's entry in --help: its own line and the indented lines under it."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        names = _NAMES.match(line)
        if names and option in _SPLIT.split(names.group(1)):
            entry = [line]
            for follow in lines[index + 1:]:
                if _OPTION_LINE.match(follow) or not follow.startswith(" "):
                    break
                entry.append(follow)
            return " ".join(part.strip() for part in entry)
    return ""


def _spec_default(text: str, flags: BinaryFlags) -> tuple[str, ...]:
    """The speculative types on by default: --spec-type's `(default: ...)`; with --no-spec-type and no
    readable default, every type the build offers (removing one that is not on is harmless)."""
    found = _DEFAULT.search(_description(text, "--spec-type"))
    if found is not None:
        return tuple(t for t in re.split(r"[,\s]+", found.group(1).strip()) if t and t != "none")
    if flags.has("--no-spec-type"):
        return tuple(t for t in flags.spec_types if t != "none")
    return ()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# The search path systemd uses for a bare command name in ExecStart= (systemd.exec(5), "Command lines").
SYSTEMD_SEARCH_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"


def resolve_binary(binary: Path) -> Path:
    """An absolute binary as is; a bare name looked up as systemd would, in its fixed search path."""
    if binary.is_absolute():
        return binary
    found = shutil.which(str(binary), path=SYSTEMD_SEARCH_PATH)
    if found is None:
        raise PreflightError(f"{binary}: no such binary in systemd's search path ({SYSTEMD_SEARCH_PATH})",
                             hint="give the binary's absolute path in the profile")
    return Path(found)


def check_executable(binary: Path) -> None:
    if not binary.is_file():
        raise PreflightError(f"{binary}: no such binary")
    if not os.access(binary, os.X_OK):
        raise PreflightError(f"{binary}: not executable", hint=f"chmod +x {binary}")


def binary_flags(binary: Path, launcher: tuple[str, ...] = (), binary_args: tuple[str, ...] = ()) -> BinaryFlags:
    """Parse `binary --help`, from the cache when this exact binary was seen before.

    With a launcher (toolbox run -c BOX, ...), the binary lives where the launcher runs it: specd
    asks it there (`launcher binary --help`) and caches by that command line. With binary_args (a
    subcommand: `llama serve`), the help asked for is that subcommand's (`llama serve --help`)."""
    if launcher:
        command = hashlib.sha256("\0".join([*launcher, str(binary), *binary_args]).encode()).hexdigest()
        return _flags_of([*launcher, str(binary), *binary_args], command, len(binary_args))
    binary = resolve_binary(binary)
    check_executable(binary)
    # A script's answer comes from what it runs, which its own bytes do not name: a wrapper around a
    # llama-server that was upgraded (or a fork swapped in) keeps its sha256. Asked every time.
    digest: str | None = None if _is_script(binary) else _sha256(binary)
    if digest is not None and binary_args:
        digest = hashlib.sha256("\0".join([digest, *binary_args]).encode()).hexdigest()
    return _flags_of([str(binary), *binary_args], digest, len(binary_args))


def _is_script(binary: Path) -> bool:
    with binary.open("rb") as handle:
        return handle.read(2) == b"#!"


def _flags_of(command: list[str], digest: str | None, binary_args: int = 0) -> BinaryFlags:
    binary = Path(command[-1 - binary_args])
    cache_file = paths.cache_dir() / "flags" / f"{digest}.json" if digest is not None else None
    try:
        if cache_file is not None:
            cached = json.loads(cache_file.read_text())
            if cached.get("format") == CACHE_FORMAT:
                return BinaryFlags(str(binary), tuple(tuple(g) for g in cached["groups"]),
                                   tuple(cached["spec_types"]), frozenset(cached["valued"]),
                                   tuple((e, f) for e, f in cached["env_names"]), tuple(cached["spec_default"]),
                                   tuple((o, d) for o, d in cached["defaults"]))
    except (OSError, ValueError, KeyError):
        pass
    try:
        result = subprocess.run(
            [*command, "--help"], capture_output=True, text=True, timeout=60, check=False,
            env={**os.environ, "LLAMA_LOG_COLORS": "off"},
        )
    except FileNotFoundError:
        what = f" (the launcher in front of {binary})" if len(command) > 1 + binary_args else ""
        raise PreflightError(f"{command[0]}: no such binary{what}") from None
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PreflightError(f"{' '.join(command)} --help failed: {exc}") from exc
    output = result.stdout + result.stderr
    try:
        flags = parse_help(str(binary), output)
    except PreflightError as error:  # say what the command said: a launcher's "No such file", a script's usage
        said = next((line.strip() for line in output.splitlines() if line.strip()), "nothing")
        raise PreflightError(f"{' '.join(command)} --help printed no options (it said: {said[:160]}); is this a "
                             "llama-server binary?") from error
    if cache_file is None:
        return flags
    cache_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache_file.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps({"format": CACHE_FORMAT, "groups": flags.groups, "spec_types": flags.spec_types,
                               "valued": sorted(flags.valued), "env_names": flags.env_names,
                               "spec_default": flags.spec_default, "defaults": flags.defaults}))
    os.replace(tmp, cache_file)
    return flags
