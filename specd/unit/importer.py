"""`specd import`: turn a hand-written llama-server unit into a profile file.

The inverse of render: known flags become typed keys, speculative flags the [speculative]
table, Environment= the [env] table, and everything else stays in `args`, in order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any

import tomlkit

from specd.durable import atomic_write
from specd.engines.facts import is_vllm_serve
from specd.errors import SpecdError, UsageError
from specd.profiles.config import Scope
from specd.profiles.flags import SPEC_TYPE_SPELLINGS, BinaryFlags, binary_flags, conventional_variable
from specd.profiles.keys import BY_FLAG, BY_NAME, MODEL_SOURCES, PROFILE_SCHEMA, SPECULATIVE_SCHEMA
from specd.profiles.load import profile_path
from specd.profiles.schema import Table, validate
from specd.unit.locate import drop_in_files
from specd.unit.parse import ParsedUnit, read_unit
from specd.unit.syntax import UnitContext, read_unit_text, resolve_name_specifiers
from specd.unit.vllm_import import import_vllm_command
from specd.unit.wrappers import is_llama_server, unwrap

_BOOLEAN = {flag: key for flag, key in BY_FLAG.items() if key.kind is bool}
_SECRET = {"api_key"}
# What specd maps itself; everything else in the unit is carried as written ([systemd.*] in the profile).
_MAPPED = {("Service", "ExecStart"), ("Service", "Environment")}
_CARRIED_SECTIONS = ("Unit", "Service", "Install")


def _spec_type(spelling: str) -> str:
    """specd's name for one speculative type, or the binary's spelling as written (chains, parameters)."""
    for specd_name, spellings in SPEC_TYPE_SPELLINGS.items():
        if spelling in spellings:
            return specd_name
    return spelling


def _convert(value: str, kind: Any) -> Any:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if int in kinds:
        try:
            return int(value)
        except ValueError:
            pass
    if float in kinds:
        try:
            return float(value)
        except ValueError:
            pass
    return value


LLAMA_SERVER_DEFAULT_HOST = "127.0.0.1"  # llama-server's own defaults, for units that leave them out
LLAMA_SERVER_DEFAULT_PORT = 8080


@dataclass(frozen=True)
class ImportRow:
    """One line of what import did: a piece of the unit and what it became."""

    source: str
    became: str


@dataclass
class ImportResult:
    data: dict[str, Any]
    rows: list[ImportRow] = field(default_factory=list)

    def row(self, source: str, became: str) -> None:
        self.rows.append(ImportRow(source, became))


def _accepts(schema: Table, key: str, value: Any) -> bool:
    return not validate({key: value}, schema, path=Path("import"), text="")


def _looks_like_value(word: str | None) -> bool:
    """A word that is a flag's value, not the next flag (negative numbers are values)."""
    return word is not None and (not word.startswith("-") or re.fullmatch(r"-\d+(\.\d+)?", word) is not None)


def _flag_target(name: str, data: dict[str, Any],
                 speculative: dict[str, Any]) -> tuple[dict[str, Any], Table, str, str] | None:
    """Where a flag's value goes: (table, its schema, key, prefix for the report), or None for `args`."""
    key = BY_FLAG.get(name)
    if key is None or key.kind is bool:
        return None
    if key.table == "speculative":
        return speculative, SPECULATIVE_SCHEMA, key.name, "speculative."
    return data, PROFILE_SCHEMA, key.name, ""


def _shown(key: str, value: Any) -> str:
    return "'…' (hidden)" if key in _SECRET else repr(value)


def _map_flags(argv: list[str], result: ImportResult, speculative: dict[str, Any],
               flags: BinaryFlags | None) -> list[str]:
    """Typed keys for the flags specd knows with values it checks; everything else, as written, to args.

    Whether a flag takes a value is the unit's own binary's --help's call when that binary is here;
    a flag that wants a value but is followed by another flag (an old bare `--flash-attn`) is kept
    as written together with its neighbour, since its meaning depends on the build."""
    data, rest, index = result.data, [], 0
    while index < len(argv):
        arg = argv[index]
        flag, has_inline, inline = arg.partition("=")
        inline_form = has_inline and flag.startswith("--")
        name = flag if inline_form else arg
        value = inline if inline_form else (argv[index + 1] if index + 1 < len(argv) else None)
        step = 1 if inline_form else 2
        arity = flags.takes_value(name) if flags else None
        if name in _BOOLEAN and arity is not True:
            switch = _BOOLEAN[name]
            (speculative if switch.table == "speculative" else data)[switch.name] = True
            result.row(arg, f"{'speculative.' if switch.table == 'speculative' else ''}{switch.name} = true")
            index += 1
            continue
        target = _flag_target(name, data, speculative)
        takes = arity if arity is not None else (inline_form or _looks_like_value(value))
        if target is None or value is None or not takes or (not inline_form and not _looks_like_value(value)
                                                            and arity is None):
            keep = argv[index:index + 2] if target is not None and value is not None and not inline_form else [arg]
            rest += keep
            result.row(" ".join(keep), "args (kept as written)" if len(keep) > 1 or target else "args")
            index += len(keep)
            continue
        table, schema, key, prefix = target
        converted = _spec_type(value) if key == "type" else _convert(value, schema.keys[key].kind)
        written = " ".join(argv[index:index + step]) if key not in _SECRET else f"{name} …"
        if key in table:
            rest += argv[index:index + step]
            result.row(written, f"args (kept as written: {prefix}{key} is already set by an earlier flag)")
        elif _accepts(schema, key, converted):
            table[key] = converted
            result.row(written, f"{prefix}{key} = {_shown(key, converted)}")
        else:
            rest += argv[index:index + step]
            result.row(written, f"args (kept as written: {value!r} is not a value specd checks for {prefix}{key})")
        index += step
    return rest


def _value_of(rest: list[str], names: tuple[str, ...]) -> tuple[str, str] | None:
    """The first (flag, value) of `rest` whose flag is one of `names` (kept in args: specd could not type it)."""
    for index, word in enumerate(rest):
        name, equals, inline = word.partition("=")
        if name in names and (equals or index + 1 < len(rest)):
            return name, inline if equals else rest[index + 1]
    return None


def _refuse_what_profiles_cannot_express(result: ImportResult, rest: list[str], where: str,
                                         flags: BinaryFlags | None, unset_cause: str) -> None:
    """Refuse, naming the cause, what a profile cannot run as the unit does; router mode when no model is named."""
    data = result.data
    host = _value_of(rest, BY_NAME["host"].flags) if "host" not in data else None
    if host is not None and (host[1].startswith("/") or host[1].endswith(".sock")):
        raise UsageError(f"{where}: --host {host[1]} is a Unix socket; specd's health gate, proxy and bench speak TCP: "
                         "listen on an address and a port (--host 127.0.0.1 --port 8080), then import")
    if host is not None:
        raise UsageError(f"{where}: --host {host[1]!r} is not a host name or address specd can gate; listen on an "
                         "address and a port, then import")
    model_flags = tuple(f for key in MODEL_SOURCES for f in BY_NAME[key].flags)
    given = _value_of(rest, model_flags) if not any(key in data for key in MODEL_SOURCES) else None
    if given is not None and not given[1]:
        why = f" ({unset_cause})" if unset_cause else ""
        raise UsageError(f"{where}: {given[0]} is given an empty value{why}; the model llama-server would load is "
                         "unknown: import the unit where its variables are set")
    if given is not None and not given[1].startswith(("/", "~")) and BY_FLAG[given[0]].path:
        raise UsageError(f"{where}: {given[0]} {given[1]} is not an absolute path; llama-server reads it relative to "
                         "WorkingDirectory=: write the absolute path into the unit, then import")
    if given is not None:
        raise UsageError(f"{where}: {given[0]} {given[1]!r} is not a model source specd can check "
                         f"({BY_FLAG[given[0]].doc}); fix the unit, then import")
    if any(key in data for key in MODEL_SOURCES):
        return
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
        converted = _convert(value, key.kind)
        if not _accepts(PROFILE_SCHEMA, name, converted):
            socket = name == "host" and (value.startswith("/") or value.endswith(".sock"))
            raise UsageError(f"{where}: {variable}={value} " + (
                "is a Unix socket; specd's health gate, proxy and bench speak TCP: listen on an address and a port"
                if socket else f"is not a value specd can check for {name} ({key.doc})") + "; fix it, then import")
        data[name] = converted
        copied = ""
        if variable not in environment:
            environment[variable] = value
            copied = "; copied from its EnvironmentFile= into [env]"
        result.row(f"{variable}={value}", f"{name} = {_shown(name, converted)} (llama-server reads "
                                                        f"it from the environment; the render keeps it there{copied})")


def _fill_defaults(result: ImportResult, speculative: dict[str, Any]) -> None:
    """What llama-server does when a flag is absent, written down, and said."""
    data = result.data
    if speculative and "type" not in speculative and {"draft_model", "draft_hf_repo"} & set(speculative):
        speculative["type"] = "draft"
        result.row("-md without --spec-type", "speculative.type = 'draft' (the classic draft-model form)")
    if "host" not in data:
        data["host"] = LLAMA_SERVER_DEFAULT_HOST
        result.row("no --host", f"host = {LLAMA_SERVER_DEFAULT_HOST!r} (llama-server's default)")
    if "port" not in data:
        data["port"] = LLAMA_SERVER_DEFAULT_PORT
        result.row("no --port", f"port = {LLAMA_SERVER_DEFAULT_PORT} (llama-server's default)")
    if "alias" not in data and ("model" in data or "hf_repo" in data):
        data["alias"] = PurePath(str(data["model"])).name if "model" in data else str(data["hf_repo"])
        result.row("no --alias", f"alias = {data['alias']!r} (the name llama-server reports in /v1/models "
                                 "without --alias): the profile renders it as --alias")
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


def _unit_binary_flags(binary: str) -> BinaryFlags | None:
    """The unit's own binary's options, when that binary is on this machine and its name says it is
    llama-server: import never runs a program whose `--help` might do something else (a script)."""
    if not is_llama_server(binary):
        return None
    try:
        return binary_flags(Path(binary))
    except SpecdError:
        return None


def profile_from_unit(text: str, where: str, description: str, context: UnitContext | None = None,
                      *, drop_ins: tuple[tuple[str, str], ...] = ()) -> ImportResult:
    """The profile a unit's llama-server command becomes, and a row for each part of the unit."""
    context = context or UnitContext.for_unit("unit.service", "user")
    parsed = read_unit(text, where, context, drop_ins)
    manager = {"HOME": context.home, "USER": context.user, "LOGNAME": context.user} if context.scope == "user" else {}
    unwrapped = unwrap(parsed.command.argv, parsed.command.environment, where, manager_environment=manager)
    result = profile_from_command(unwrapped.argv, {**parsed.assigned, **unwrapped.environment}, description,
                                  where=where, notes=(*parsed.notes, *unwrapped.notes),
                                  unset_cause=parsed.unset_cause(),
                                  settings_environment={**parsed.command.environment, **unwrapped.environment})
    if unwrapped.launcher:
        result.data["launcher"] = list(unwrapped.launcher)
    for drop_in, _ in drop_ins:
        result.row(drop_in, "drop-in: read after the unit, as systemd does; its directives are carried")
    _carry_directives(parsed, result, context)
    return result


def profile_from_command(argv: list[str], environment: dict[str, str], description: str, *, where: str,
                         notes: tuple[str, ...] = (), unset_cause: str = "",
                         settings_environment: dict[str, str] | None = None) -> ImportResult:
    """The profile one llama-server command line (binary first) and its environment become.

    environment: what the profile's [env] carries; settings_environment: everything llama-server
    sees (with EnvironmentFile= variables, which the carried EnvironmentFile= keeps giving it)."""
    result = ImportResult({"description": description, "binary": argv[0]})
    for note in notes:
        result.row("unit", note)
    if is_vllm_serve(argv):  # a vLLM unit becomes an engine = "vllm" profile (specd.unit.vllm_import)
        import_vllm_command(argv, environment, description, result, where=where)
        return result
    flags = _unit_binary_flags(argv[0])
    speculative: dict[str, Any] = {}
    rest = _map_flags(argv[1:], result, speculative, flags)
    environment = dict(environment)
    _settings_from_environment(result, environment, settings_environment or environment, flags, where)
    _refuse_what_profiles_cannot_express(result, rest, where, flags, unset_cause)
    _fill_defaults(result, speculative)
    if rest:
        result.data["args"] = rest
    if speculative:
        result.data["speculative"] = speculative
    if environment:
        result.data["env"] = dict(environment)
        _report_settings(environment, flags, result)
    return result


def import_unit(unit_path: Path, profiles_dir: Path, name: str, *, force: bool = False,
                unit_name: str | None = None, scope: Scope = "user") -> Path:
    return import_unit_report(unit_path, profiles_dir, name, force=force, unit_name=unit_name, scope=scope)[0]


def import_unit_report(unit_path: Path, profiles_dir: Path, name: str, *, force: bool = False,
                       unit_name: str | None = None, scope: Scope = "user") -> tuple[Path, ImportResult]:
    text = read_unit_text(unit_path)
    target = profile_path(profiles_dir, name)
    if target.exists() and not force:
        raise UsageError(f"{target} exists; pick another name or pass --force")
    context = UnitContext.for_unit(unit_name or unit_path.name, scope)
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
