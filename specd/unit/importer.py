"""`specd import`: turn a hand-written llama-server unit into a profile file.

The inverse of render, with one rule above the others: clients see what they saw before. The
program must be llama-server or a fork (recognise.py); each word is read as llama-server reads it
(argvmap.py): known flags become typed keys, speculative flags the [speculative] table,
Environment= the [env] table, words before the flags `binary_args`, everything else `args`, in
order; what llama-server does without a flag (its id, host, port) becomes an `implicit` key, for
which the render writes no flag.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomlkit

from specd.durable import atomic_write
from specd.endpoint import is_socket_host
from specd.engines.facts import is_vllm_serve
from specd.errors import SpecdError, UsageError
from specd.profiles.config import Scope
from specd.profiles.flags import BinaryFlags, conventional_variable
from specd.profiles.keys import BY_FLAG, BY_NAME, KEYS, MODEL_SOURCES, PROFILE_SCHEMA, reported_model_id
from specd.profiles.load import profile_from_data, profile_path
from specd.profiles.schema import validate
from specd.unit.argvmap import (
    ArgvReader,
    Mapping,
    accepts,
    convert,
    is_option,
    map_words,
    option_name,
    resolve_repeats,
    shown,
    unspeculative,
)
from specd.unit.locate import drop_in_files
from specd.unit.parse import ParsedUnit, read_unit
from specd.unit.recognise import looks_like_server, recognise
from specd.unit.render import build_argv
from specd.unit.specifiers import UnitContext, resolve_name_specifiers
from specd.unit.syntax import read_unit_text
from specd.unit.vllm_import import import_vllm_command
from specd.unit.wrappers import unwrap

_CARRIED_SECTIONS = ("Unit", "Service", "Install")
PATH_KEYS = tuple(key for key in KEYS if key.path and key.flags)  # the files and directories llama-server opens
# llama-server's own defaults, for a binary that cannot be asked (its --help says them otherwise).
LLAMA_SERVER_DEFAULT_HOST = "127.0.0.1"
LLAMA_SERVER_DEFAULT_PORT = 8080
# Model sources specd does not manage: the id llama-server reports for them is a path it picks itself.
_UNMANAGED_SOURCES = {"-mu": "--model-url", "--model-url": "--model-url", "-dr": "--docker-repo",
                      "--docker-repo": "--docker-repo"}


@dataclass(frozen=True)
class ImportRow:
    """One line of what import did: a piece of the unit and what it became."""

    source: str
    became: str


@dataclass
class ImportResult:
    data: dict[str, Any]
    rows: list[ImportRow] = field(default_factory=list)
    checked: bool = True  # the binary's own --help was asked; False: its flags could not be checked
    flags: BinaryFlags | None = None  # its --help's flags, where it was asked: the render check uses them

    def row(self, source: str, became: str) -> None:
        self.rows.append(ImportRow(source, became))


def _value_of(rest: list[str], names: tuple[str, ...]) -> tuple[str, str] | None:
    """The first (flag, value) of `rest` whose flag is one of `names` (kept in args: specd could not type it)."""
    for index, word in enumerate(rest):
        name, equals, inline = word.partition("=")
        if option_name(name) in names and (equals or index + 1 < len(rest)):
            return name, inline if equals else rest[index + 1]
    return None


def _not_named(data: dict[str, Any]) -> str:
    """For a refusal about a program whose name does not say llama-server: it was taken for one by its flags."""
    binary = str(data["binary"])
    if looks_like_server(binary, tuple(data.get("binary_args", ()))):
        return ""
    return (f" ({binary} is not named llama-server and was taken for it by its flags; if it is a wrapper script "
            "that runs llama-server, write the llama-server command it runs into ExecStart= instead)")


def _refuse_what_profiles_cannot_express(result: ImportResult, rest: list[str], where: str,
                                         flags: BinaryFlags | None, cause_of: Callable[[str], str]) -> None:
    """Refuse, naming the cause, what a profile cannot run as the unit does; router mode when no model is named."""
    data = result.data

    def why(flag: str, value: str) -> str:
        cause = cause_of(flag) if not value else ""
        return f" ({cause})" if cause else ""

    socket = is_socket_host(str(data.get("host", "")))  # its --port stays in args: _port_beside_socket
    for name in ("host", "port", "alias"):
        given = _value_of(rest, BY_NAME[name].flags) if name not in data and not (socket and name == "port") else None
        if given is not None:
            raise UsageError(f"{where}: {given[0]} {given[1]!r} is not a {name} specd can gate ({BY_NAME[name].doc})"
                             f"{why(given[0], given[1])}; fix the unit, then import")
    model_flags = tuple(f for key in MODEL_SOURCES for f in BY_NAME[key].flags)
    given = _value_of(rest, model_flags) if not any(key in data for key in MODEL_SOURCES) else None
    if given is not None and not given[1]:
        raise UsageError(f"{where}: {given[0]} is given an empty value{why(given[0], given[1])}; the model "
                         "llama-server would load is unknown: import the unit where its variables are set")
    if given is not None and not given[1].startswith(("/", "~")) and BY_FLAG[given[0]].path:
        raise UsageError(f"{where}: {given[0]} {given[1]} is not an absolute path; llama-server reads it relative to "
                         f"WorkingDirectory=: write the absolute path into the unit, then import{_not_named(data)}")
    if given is not None:
        raise UsageError(f"{where}: {given[0]} {given[1]!r} is not a model source specd can check "
                         f"({BY_FLAG[given[0]].doc}); fix the unit, then import")
    if any(key in data for key in MODEL_SOURCES):
        return
    unmanaged = next((word for word in rest if option_name(word.split("=", 1)[0]) in _UNMANAGED_SOURCES), None)
    if unmanaged is not None:
        raise UsageError(f"{where}: the model comes from {_UNMANAGED_SOURCES[option_name(unmanaged.split('=', 1)[0])]}"
                         " only: llama-server downloads it to a path it picks and serves that path as the model's id; "
                         "specd manages a model file (-m) or a Hugging Face repo (-hf): download the model and "
                         "write -m PATH (or -hf), then import")
    if flags is not None and not flags.has("--models-dir"):
        raise UsageError(f"{where}: its llama-server command names no model (-m, -hf, --models-dir or "
                         f"--models-preset) and {data['binary']} has no router mode (no --models-dir in its --help): "
                         "the server would not start with it")
    data["router"] = True
    result.row("no model (-m, -hf, --models-dir, --models-preset)",
               "router = true: llama-server starts in router mode and serves the models of its download cache "
               "($LLAMA_CACHE, else the Hugging Face cache ~/.cache/huggingface/hub); "
               + ("this build has router mode" if flags else "a build without router mode would not start: "
                  "preflight checks the binary"))


# Keys a unit may set through llama-server's LLAMA_ARG_* variables alone that specd must know itself:
# where the server listens, what it serves (the gate asks for it), and the model.
_SETTINGS_SPECD_NEEDS = ("host", "port", "alias", *MODEL_SOURCES)


def _settings_from_environment(result: ImportResult, environment: dict[str, str], seen: dict[str, str],
                               flags: BinaryFlags | None, where: str) -> None:
    """A LLAMA_ARG_* variable configures llama-server as its flag does: where no flag set one of the keys
    specd needs, the variable's value becomes the key, and the variable stays in [env] (the render then
    writes no flag for that key, so the server gets the setting the way it got it before)."""
    data = result.data
    for name in _SETTINGS_SPECD_NEEDS:
        key = BY_NAME[name]
        variable = flags.variable_of(key.flags[0]) if flags else conventional_variable(key.flags[0])
        value = seen.get(variable)
        if name in data or not value:
            continue
        converted = convert(value, key.kind)
        if name == "port" and is_socket_host(str(data.get("host", ""))):
            continue  # llama-server ignores the port on a socket: the variable stays in [env], as it was
        if not accepts(PROFILE_SCHEMA, name, converted):
            raise UsageError(f"{where}: {variable}={value} is not a value specd can check for {name} ({key.doc}); "
                             "fix it, then import")
        data[name] = converted
        data.setdefault("implicit", []).append(name)  # the render writes no flag: the variable sets it
        copied = ""
        if variable not in environment:
            environment[variable] = value
            copied = "; copied from its EnvironmentFile= into [env]"
        result.row(f"{variable}={value}", f"{name} = {shown(name, converted)} (llama-server reads "
                                                        f"it from the environment; the render keeps it there{copied})")


def _fill_defaults(result: ImportResult, speculative: dict[str, Any], flags: BinaryFlags | None,
                   where: str) -> None:
    """What llama-server does when a flag is absent, written down as `implicit` keys, and said: the
    render then writes no flag for them, so the server is started as before and serves the same id,
    host and port (keys.reported_model_id; host and port from the binary's own --help where it was asked)."""
    data = result.data
    implicit: list[str] = list(data.pop("implicit", []))
    if speculative and "type" not in speculative and {"draft_model", "draft_hf_repo"} & set(speculative):
        speculative["type"] = "draft"
        result.row("-md without --spec-type", "speculative.type = 'draft' (the classic draft-model form)")
    if "alias" not in data and ("model" in data or "hf_repo" in data):
        served = reported_model_id(str(data["model"]) if "model" in data else None,
                                   str(data["hf_repo"]) if "hf_repo" in data else None)
        if served is None or not accepts(PROFILE_SCHEMA, "alias", served):
            raise UsageError(f"{where}: with no --alias, llama-server serves the model as {served!r} (its path as "
                             "given), which a profile's alias cannot hold (spaces or commas): give the unit an "
                             "--alias (clients then see that name), then import")
        data["alias"] = served
        implicit.append("alias")
        what = "the -hf repo" if "hf_repo" in data else "the model path"
        result.row("no --alias", f"alias = {served!r}: the id llama-server reports in /v1/models with no --alias "
                                 f"({what} as given); implicit: no --alias is written, and the gate asks for this id")
    for name, fallback in (("host", LLAMA_SERVER_DEFAULT_HOST), ("port", str(LLAMA_SERVER_DEFAULT_PORT))):
        if name in data:
            continue
        if name == "port" and is_socket_host(str(data["host"])):
            result.row("no --port", f"no port: host {data['host']} is a Unix socket (specd.endpoint), where "
                                    "llama-server takes no port; clients connect to the socket, as before")
            continue
        said = flags.default_of(f"--{name}") if flags is not None else None
        value = convert(said or fallback, BY_NAME[name].kind)
        if said is None or not accepts(PROFILE_SCHEMA, name, value):
            value = convert(fallback, BY_NAME[name].kind)
            source = ("llama-server's default; assumed: the binary could not be asked" if flags is None
                      else "llama-server's default; its --help does not say")
        else:
            source = f"{data['binary']}'s default, per its --help"
        data[name] = value
        implicit.append(name)
        result.row(f"no --{name}", f"{name} = {value!r} ({source}); implicit: no --{name} is written")
    if implicit:
        data["implicit"] = implicit
    data.setdefault("metrics", False)


def _carry_directives(parsed: ParsedUnit, result: ImportResult, context: UnitContext) -> None:
    carried: dict[str, dict[str, list[str]]] = {}
    scope = context.scope
    for directive in parsed.directives:
        source = f"{directive.key}={directive.value} ([{directive.section}] line {directive.line})"
        if directive.section not in _CARRIED_SECTIONS:
            result.row(source, "NOT carried: specd renders [Unit], [Service] and [Install] only")
            continue
        value = resolve_name_specifiers(directive.value, context)
        carried.setdefault(directive.section, {}).setdefault(directive.key, []).append(value)
        note = ""
        if directive.key in ("User", "Group", "DynamicUser") and scope == "user":
            note = " (a user unit cannot change user: systemd --user ignores it)"
        result.row(source, f"systemd.{directive.section}.{directive.key}, as written{note}")
    if carried:
        result.data["systemd"] = {section: {key: values[0] if len(values) == 1 else values
                                            for key, values in keys.items()}
                                  for section, keys in carried.items()}


def _report_settings(environment: dict[str, str], flags: BinaryFlags | None, result: ImportResult) -> None:
    for name in sorted(environment):
        if name.startswith("LLAMA_ARG_"):
            option = flags.setting_of(name) if flags else None
            result.row(f"{name}=...", f"env (llama-server reads it as {option or 'a setting'}; a flag on the "
                                      "command line wins over it)")
        else:
            result.row(f"{name}=...", "env")


def profile_from_unit(text: str, where: str, description: str, context: UnitContext | None = None,
                      *, drop_ins: tuple[tuple[str, str], ...] = ()) -> ImportResult:
    """The profile a unit's llama-server command becomes, and a row for each part of the unit."""
    context = context or UnitContext.for_unit("unit.service", "user")
    parsed = read_unit(text, where, context, drop_ins)
    manager = {"HOME": context.home, "USER": context.user, "LOGNAME": context.user} if context.scope == "user" else {}
    unwrapped = unwrap(parsed.command.argv, parsed.command.environment, where, manager_environment=manager)
    result = profile_from_command(unwrapped.argv, {**parsed.assigned, **unwrapped.environment}, description,
                                  where=where, notes=(*parsed.notes, *unwrapped.notes),
                                  empty_cause=parsed.empty_value_cause, launcher=unwrapped.launcher,
                                  settings_environment={**parsed.command.environment, **unwrapped.environment},
                                  check=False)
    for drop_in, _ in drop_ins:
        result.row(drop_in, "drop-in: read after the unit, as systemd does; its directives are carried")
    _carry_directives(parsed, result, context)
    _say_relative_paths(result, where)
    _check_it_renders(result, result.flags, where)  # with the directives: WorkingDirectory= places relative paths
    return result


def _say_relative_paths(result: ImportResult, where: str) -> None:
    """A path the unit gives llama-server relative to its working directory stays as written (the argv and the
    id served without --alias are those words); the profile keeps WorkingDirectory=, or the import is refused."""
    service = result.data.get("systemd", {}).get("Service", {})
    directory = service.get("WorkingDirectory")
    for key in PATH_KEYS:
        table = result.data.get("speculative", {}) if key.table == "speculative" else result.data
        value = table.get(key.name)
        if not isinstance(value, str) or value.startswith(("/", "~", "${SPECD_CACHE}")):
            continue
        if not isinstance(directory, str) or not directory.removeprefix("-").startswith(("/", "~")):
            raise UsageError(f"{where}: {key.flags[0]} {value} is a relative path; llama-server opens it relative to "
                             "its working directory, and the unit sets no absolute WorkingDirectory="
                             + (f" (it sets {directory!r})" if directory else "") + ": add WorkingDirectory= or "
                             f"write the absolute path, then import{_not_named(result.data)}")
        result.row(f"{key.flags[0]} {value}", f"kept as written: llama-server opens it in WorkingDirectory="
                                              f"{directory} (carried), so the argv and the id it serves stay the same")


def profile_from_command(argv: list[str], environment: dict[str, str], description: str, *, where: str,
                         notes: tuple[str, ...] = (), empty_cause: Callable[[str], str] = lambda flag: "",
                         launcher: tuple[str, ...] = (),
                         settings_environment: dict[str, str] | None = None, check: bool = True) -> ImportResult:
    """The profile one llama-server command line (binary first) and its environment become.

    environment: what the profile's [env] carries; settings_environment: everything llama-server
    sees (with EnvironmentFile= variables, which the carried EnvironmentFile= keeps giving it);
    empty_cause(flag): why that flag's value is empty (the unset variable and where it comes from);
    check=False: the caller adds the unit's directives first, then checks that it loads and renders."""
    result = ImportResult({"description": description, "binary": argv[0]})
    for note in notes:
        result.row("unit", note)
    if is_vllm_serve(argv):  # a vLLM unit becomes an engine = "vllm" profile (specd.unit.vllm_import)
        import_vllm_command(argv, environment, description, result, where=where)
        return result
    leading = tuple(next((argv[1:i] for i in range(1, len(argv)) if is_option(argv[i])), argv[1:]))
    program = recognise(argv, leading, launcher, where)
    result.checked, result.flags = program.checked, program.flags
    result.row(argv[0], program.how)
    reader = ArgvReader(argv[0], program.flags, where, empty_cause)
    binary_args, grouped = reader.group(argv[1:])
    mapping = Mapping(result.data)
    map_words(resolve_repeats(grouped, mapping), mapping)
    unspeculative(mapping)
    for source, became in mapping.rows:
        result.row(source, became)
    if binary_args:
        result.data["binary_args"] = binary_args
        result.row(" ".join(binary_args), "binary_args: kept right after the binary, in their order")
    if launcher:
        result.data["launcher"] = list(launcher)
    speculative, rest = mapping.speculative, mapping.rest
    _port_beside_socket(result, rest)
    environment = dict(environment)
    _settings_from_environment(result, environment, settings_environment or environment, program.flags, where)
    _refuse_what_profiles_cannot_express(result, rest, where, program.flags, empty_cause)
    _fill_defaults(result, speculative, program.flags, where)
    if rest:
        result.data["args"] = rest
    if speculative:
        result.data["speculative"] = speculative
    if environment:
        result.data["env"] = dict(environment)
        _report_settings(environment, program.flags, result)
    if check:
        _check_it_renders(result, program.flags, where)
    return result


def _port_beside_socket(result: ImportResult, rest: list[str]) -> None:
    """A --port beside a socket --host does nothing (llama-server ignores it there); a profile's socket host
    takes no port, so the flag stays in args, as written, and the argv stays the same."""
    if "port" not in result.data or not is_socket_host(str(result.data.get("host", ""))):
        return
    port = result.data.pop("port")
    rest += ["--port", str(port)]
    result.row(f"--port {port}", f"args: kept as written; host {result.data['host']} is a Unix socket, where "
                                 "llama-server ignores the port")


def _check_it_renders(result: ImportResult, flags: BinaryFlags | None, where: str) -> None:
    """What import writes must load and (where the binary was asked) render: refused here, naming the cause,
    not at the first `specd show`."""
    sources = [f"{BY_NAME[key].flags[0]} {result.data[key]}" for key in MODEL_SOURCES if key in result.data]
    if len(sources) > 1 and not set(MODEL_SOURCES[:2]).isdisjoint(result.data):
        raise UsageError(f"{where}: its command names two model sources ({' and '.join(sources)}): a profile "
                         "serves one model (-m or -hf) or runs the router (--models-dir/--models-preset); drop "
                         "one, then import")
    problems = validate(result.data, PROFILE_SCHEMA, path=Path(where), text="")
    if problems:
        raise UsageError(f"{where} cannot become a valid profile (nothing was written): " + "; ".join(problems))
    try:
        profile = profile_from_data(result.data, Path(where), "imported")
        if flags is not None:
            build_argv(profile, flags)
    except SpecdError as error:
        raise UsageError(f"{where}: its command cannot become a profile (nothing was written): {error.message}") \
            from None


def import_unit(unit_path: Path, profiles_dir: Path, name: str, *, force: bool = False,
                unit_name: str | None = None, scope: Scope = "user") -> Path:
    return import_unit_report(unit_path, profiles_dir, name, force=force, unit_name=unit_name, scope=scope)[0]


def import_unit_report(unit_path: Path, profiles_dir: Path, name: str, *, force: bool = False,
                       unit_name: str | None = None, scope: Scope = "user") -> tuple[Path, ImportResult]:
    text = read_unit_text(unit_path)
    target = profile_path(profiles_dir, name)
    if target.exists() and not force:
        raise UsageError(f"{target} exists; pick another name or pass --force")
    context = UnitContext.for_unit(unit_name or unit_path.name, scope, fragment=str(unit_path))
    drop_ins = tuple((str(path), read_unit_text(path)) for path in drop_in_files(unit_path, context.unit_name, scope))
    result = profile_from_unit(text, str(unit_path), f"imported from {unit_name or unit_path}", context,
                               drop_ins=drop_ins)
    write_profile(target, result, source=str(unit_path))
    return target, result


def write_profile(target: Path, result: ImportResult, *, source: str) -> None:
    """Write an imported profile, only when it validates (nothing is written otherwise)."""
    document = tomlkit.document()
    document.add(tomlkit.comment(f"Imported by `specd import` from {source}"))
    for key, value in result.data.items():
        document[key] = value
    rendered = tomlkit.dumps(document)
    problems = validate(result.data, PROFILE_SCHEMA, path=target, text=rendered)
    if problems:
        raise UsageError(f"{source} cannot become a valid profile (nothing was written): " + "; ".join(problems))
    atomic_write(target, rendered.encode("utf-8"))
