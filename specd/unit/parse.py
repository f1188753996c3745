"""Read llama-server units back: ExecStart argv and Environment= of specd's or hand-written units.

Used by `specd import`, and to find the alias and port of a unit whose profile file is gone
(reverting to it, rolling back to it). Follows systemd.syntax(7) for the parts units use.
"""

from __future__ import annotations

import glob
from dataclasses import dataclass, field
from pathlib import Path

from specd.endpoint import Endpoint, is_socket_host
from specd.engines.facts import command_facts
from specd.errors import UsageError
from specd.profiles.keys import reported_model_id
from specd.unit.specifiers import SPECIFIER_MEANINGS, UnitContext, resolve_specifiers, specifiers_in
from specd.unit.syntax import (
    expand_variables,
    logical_lines,
    parse_assignments,
    parse_environment_file,
    read_unit_text,
    referenced_variables,
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
        itself (the -hf repo or the model path, as given: keys.reported_model_id); None in router mode.
        A flag wins over its LLAMA_ARG_* variable, as in llama-server. A `vllm serve` command's is its
        --served-model-name, else its model as given (vLLM's default)."""
        vllm = command_facts(self.argv)
        if vllm is not None:
            return vllm.served_name
        value = self.option("--alias", "-a") or self.environment.get("LLAMA_ARG_ALIAS")
        if value:
            return value.split(",")[0]
        return reported_model_id(self.option("--model", "-m") or self.environment.get("LLAMA_ARG_MODEL"),
                                 self.option("--hf-repo", "-hf", "-hfr") or self.environment.get("LLAMA_ARG_HF_REPO"))

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
        """Where it listens (specd.endpoint): --host/--port, else their LLAMA_ARG_* variables, else the server's
        defaults; a --host that is a socket path, the socket."""
        host = self.option("--host") or self.environment.get("LLAMA_ARG_HOST") or "127.0.0.1"
        if is_socket_host(host):  # llama-server listens on a Unix socket and ignores the port
            return Endpoint(host).base_url
        vllm = command_facts(self.argv)
        default_port = str(vllm.port) if vllm is not None else self.environment.get("LLAMA_ARG_PORT") or "8080"
        port = self.option("--port") or default_port
        return Endpoint(host, int(port)).base_url if port.isdigit() else f"http://{host}:{port}"


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
    exec_words: tuple[str, ...] = ()  # ExecStart= after specifiers, before variables: where each value came from
    sources: tuple[tuple[str, str], ...] = ()  # variable -> the line or file that set it last

    def unset_cause(self) -> str:
        """Why a value of the command is empty, when variables it uses are unset: for a refusal."""
        if not self.unset:
            return ""
        files = "".join(f"; EnvironmentFile=-{path} does not exist here" for path in self.skipped_files)
        return f"ExecStart= uses ${', $'.join(self.unset)}, which nothing sets here{files}"

    def empty_value_cause(self, flag: str) -> str:
        """Why `flag` gets an empty value (or none): the variable its word uses and where that should come
        from; every unset variable of the command when the flag itself came out of one."""
        for index, word in enumerate(self.exec_words):
            name, equals, inline = word.partition("=")
            value = inline if equals and name == flag else (
                self.exec_words[index + 1] if word == flag and index + 1 < len(self.exec_words) else None)
            names = sorted(referenced_variables([value])) if value is not None else []
            if names:
                return "; ".join(self._variable_cause(name) for name in names)
        return self.unset_cause()

    def _variable_cause(self, name: str) -> str:
        source = dict(self.sources).get(name)
        if name in self.command.environment:
            return f"${{{name}}} is empty (set so by {source})" if source else f"${{{name}}} is empty"
        files = [f"EnvironmentFile=-{path} (optional), which does not exist here" for path in self.skipped_files]
        where = f"; it would come from {' or '.join(files)}" if files else (
            "; no Environment= or EnvironmentFile= of the unit sets it")
        return f"${{{name}}} is not set{where}"


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
    exec_raw: str = ""  # the ExecStart= value as written
    assigned: dict[str, str] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
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
            self.exec_line, self.exec_raw = here, value
        elif key == "Environment":
            if not value:
                self.assigned.clear()
            assigned = parse_assignments(resolve_specifiers(value, self.context, here), here)
            self.assigned.update(assigned)
            self.sources.update({name: f"Environment= ({here})" for name in assigned})
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
    _check_program(service, where)
    environment = dict(service.assigned)
    skipped: list[str] = []
    for directive, here in service.files:  # systemd: EnvironmentFile= variables win over Environment=
        variables = _environment_file(directive.value, context, here, service.notes, skipped)
        environment.update(variables)
        service.sources.update({name: f"EnvironmentFile={directive.value} ({here})" for name in variables})
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
                      tuple(skipped), tuple(service.exec_start), tuple(service.sources.items()))


def _check_program(service: _Service, where: str) -> None:
    """systemd runs an absolute path or a command name from its search path; anything else (a relative
    path, often a placeholder nobody filled in) makes it refuse the unit: say so, and which specifiers made it."""
    program = (service.exec_start or [""])[0]
    if program.startswith("/") or "/" not in program:
        return
    raw = split_words(service.exec_raw, where)[0] if service.exec_raw else program
    used = sorted(specifiers_in(raw))
    why = "".join(f"; %{code} in {raw[:60]!r} is {service.context.specifier(code)!r}, {SPECIFIER_MEANINGS[code]}"
                  for code in used)
    hint = " ('%HOME%' reads as %H, the host name: write %h for the home directory)" if "%HOME" in raw else ""
    raise UsageError(f"{service.exec_line or where}: ExecStart= runs {program!r}, which is neither an absolute path "
                     f"nor a command name, so systemd refuses the unit (bad-setting){why}{hint}; write the "
                     "program's absolute path, then import")


def parse_unit(text: str, where: str = "unit") -> UnitCommand:
    """The command of a unit (specd's own or a hand-written one), read with systemd's rules."""
    return read_unit(text, where).command
