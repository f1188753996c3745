"""Read llama-server units back: ExecStart argv and Environment= of specd's or hand-written units.

Used by `specd import`, and to find the alias and port of a unit whose profile file is gone
(reverting to it, rolling back to it). Follows systemd.syntax(7) for the parts units use.
"""

from __future__ import annotations

import glob
from dataclasses import dataclass, field
from pathlib import Path, PurePath

from specd.engines.facts import command_facts
from specd.errors import UsageError
from specd.unit.syntax import (
    SPECIFIER_MEANINGS,
    UnitContext,
    expand_variables,
    logical_lines,
    parse_assignments,
    parse_environment_file,
    read_unit_text,
    referenced_variables,
    resolve_specifiers,
    specifiers_in,
    split_words,
)


@dataclass(frozen=True)
class UnitCommand:
    argv: list[str]
    environment: dict[str, str]

    def option(self, *names: str) -> str | None:
        for index, arg in enumerate(self.argv[:-1]):
            if arg in names:
                return self.argv[index + 1]
        for arg in self.argv:
            for name in names:
                if name.startswith("--") and arg.startswith(name + "="):
                    return arg.split("=", 1)[1]
        return None

    @property
    def alias(self) -> str | None:
        """The name clients ask for: --alias (the first of several), else what llama-server reports
        itself (the model file's name, the Hub repo); None in router mode (it serves many). A `vllm
        serve` command's is its --served-model-name, else its model as given (vLLM's default)."""
        vllm = command_facts(self.argv)
        if vllm is not None:
            return vllm.served_name
        value = self.option("--alias", "-a")
        if value:
            return value.split(",")[0]
        model = self.option("--model", "-m")
        if model:
            return PurePath(model).name
        return self.option("--hf-repo", "-hf", "-hfr")

    @property
    def api_key(self) -> str | None:
        """The key clients must send: --api-key (the first of several), --api-key-file, LLAMA_ARG_API_KEY."""
        value = (self.option("--api-key") or self.environment.get("LLAMA_ARG_API_KEY")
                 or self.environment.get("VLLM_API_KEY"))
        if value:
            return value.split(",")[0]
        key_file = self.option("--api-key-file") or self.environment.get("LLAMA_ARG_API_KEY_FILE")
        if key_file:
            try:
                lines = Path(key_file).read_text(encoding="utf-8").splitlines()
            except (OSError, UnicodeDecodeError):
                return None
            return next((line.strip() for line in lines if line.strip() and not line.startswith("#")), None)
        return None

    @property
    def base_url(self) -> str:
        host = self.option("--host") or "127.0.0.1"
        vllm = command_facts(self.argv)
        port = self.option("--port") or str(vllm.port if vllm is not None else 8080)
        return f"http://{host}:{port}"


@dataclass(frozen=True)
class Directive:
    section: str
    key: str
    value: str
    line: int


@dataclass(frozen=True)
class ParsedUnit:
    """A unit as systemd reads it: the resolved command, its environment, and everything else."""

    command: UnitCommand
    directives: tuple[Directive, ...]  # everything but ExecStart= and Environment=, as written
    notes: tuple[str, ...]  # where each resolved value came from (specifiers, variables, files)
    assigned: dict[str, str]  # what Environment= lines set (EnvironmentFile= variables are not copied)
    unset: tuple[str, ...] = ()  # variables ExecStart= uses that nothing sets (they expand to nothing)
    skipped_files: tuple[str, ...] = ()  # optional EnvironmentFile=s that do not exist here

    def unset_cause(self) -> str:
        """Why a value of the command is empty, when variables it uses are unset: for a refusal."""
        if not self.unset:
            return ""
        files = "".join(f"; EnvironmentFile=-{path} does not exist here" for path in self.skipped_files)
        return f"ExecStart= uses ${', $'.join(self.unset)}, which nothing sets here{files}"


def _exec_words(value: str, where: str) -> list[str]:
    words = split_words(value, where)
    while words and words[0][:1] in "-@+!:|" and not words[0].startswith("/"):
        words[0] = words[0][1:] or words.pop(0)
    return words


def _environment_file(value: str, context: UnitContext, here: str, notes: list[str],
                      skipped: list[str]) -> dict[str, str]:
    """An EnvironmentFile= line's variables: a path or a glob (files in name order, later ones winning),
    which may match nothing or be unreadable when prefixed with `-`, as systemd allows."""
    optional = value.startswith("-")
    pattern = resolve_specifiers(value.removeprefix("-"), context, here)
    paths = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
    loaded: dict[str, str] = {}
    for path in paths or [pattern]:
        try:
            file_text = read_unit_text(Path(path))
        except UsageError:
            if optional:
                notes.append(f"EnvironmentFile={path} (optional) does not exist here: skipped")
                skipped.append(path)
                continue
            raise UsageError(f"{here}: EnvironmentFile={path} cannot be read; systemd would refuse to start "
                             "the unit too (prefix it with - if it is optional)") from None
        variables = parse_environment_file(file_text, path)
        if variables:
            notes.append(f"{', '.join(sorted(variables))} from EnvironmentFile={path}")
        loaded.update(variables)
    return loaded


@dataclass
class _Service:
    """What the lines of a unit and its drop-ins set, in order (a list reset by an empty assignment)."""

    context: UnitContext
    exec_start: list[str] | None = None
    exec_line: str = ""
    assigned: dict[str, str] = field(default_factory=dict)
    files: list[tuple[Directive, str]] = field(default_factory=list)  # read once the last drop-in is in
    directives: list[Directive] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    specifiers: set[str] = field(default_factory=set)  # used where specd resolves them itself

    def take(self, directive: Directive, here: str) -> None:
        key, value = directive.key, directive.value
        if directive.section == "Service" and key in ("ExecStart", "Environment", "EnvironmentFile"):
            self.specifiers |= specifiers_in(value)
        if directive.section != "Service" or key not in ("ExecStart", "Environment", "EnvironmentFile"):
            self.directives.append(directive)
        elif key == "ExecStart":
            words = _exec_words(value, here) if value else []
            self.exec_start = [resolve_specifiers(w, self.context, here) for w in words] or None
            self.exec_line = here
        elif key == "Environment":
            if not value:
                self.assigned.clear()
            self.assigned.update(parse_assignments(resolve_specifiers(value, self.context, here), here))
        elif not value:
            self.files.clear()
        else:
            self.files.append((directive, here))


def read_unit(text: str, where: str = "unit", context: UnitContext | None = None,
              drop_ins: tuple[tuple[str, str], ...] = ()) -> ParsedUnit:
    """Parse a unit's text with systemd's rules: specifiers, Environment=, EnvironmentFile=
    (read from disk, `-` prefix optional), variables in ExecStart=, quoting and C escapes.
    drop_ins: (where, text) of its `.d/*.conf` files, applied after it in order; an empty
    assignment resets a list (ExecStart=, Environment=, EnvironmentFile=) as systemd does."""
    context = context or UnitContext.for_unit(Path(where).name if where.endswith(".service") else "unit.service",
                                              "user")
    service = _Service(context)
    for source, source_text in ((where, text), *drop_ins):
        section = ""
        for line in logical_lines(source_text):
            here = f"{source} line {line.line}"
            if line.text.startswith("[") and line.text.endswith("]"):
                section = line.text[1:-1]
            elif "=" not in line.text:
                service.notes.append(f"{here}: {line.text[:60]!r} is neither a [Section] nor KEY=value; "
                                     "systemd ignores it, so nothing on it reaches the server (if it continues "
                                     "the line before, that line lacks its trailing \\)")
            else:
                key, value = (part.strip() for part in line.text.split("=", 1))
                service.take(Directive(section, key, value, line.line), here)
    if not service.exec_start:
        raise UsageError(f"{where}: no ExecStart= in its [Service] section")
    environment = dict(service.assigned)
    skipped: list[str] = []
    for directive, here in service.files:  # systemd: EnvironmentFile= variables win over Environment=
        environment.update(_environment_file(directive.value, context, here, service.notes, skipped))
    notes = service.notes
    for code in sorted(service.specifiers & set(SPECIFIER_MEANINGS)):
        notes.append(f"%{code} is {context.specifier(code)!r}: {SPECIFIER_MEANINGS[code]} "
                     f"({context.unit_name}, {context.scope} manager)")
    for name in sorted(referenced_variables(service.exec_start)):
        source = "unset: expands to nothing" if name not in environment else "from the unit's environment"
        notes.append(f"ExecStart ({service.exec_line}) uses ${name}: {source}")
    argv = expand_variables(service.exec_start, environment)
    directives = (*service.directives, *(directive for directive, _ in service.files))
    unset = tuple(sorted(referenced_variables(service.exec_start) - set(environment)))
    return ParsedUnit(UnitCommand(argv, environment), directives, tuple(notes), service.assigned, unset,
                      tuple(skipped))


def parse_unit(text: str, where: str = "unit") -> UnitCommand:
    """The command of a unit (specd's own or a hand-written one), read with systemd's rules."""
    return read_unit(text, where).command
