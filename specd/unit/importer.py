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

from specd.deploy.unitfiles import atomic_write
from specd.errors import UsageError
from specd.profiles.flags import SPEC_TYPE_SPELLINGS
from specd.profiles.load import PROFILE_SCHEMA, SPECULATIVE_SCHEMA, profile_path
from specd.profiles.schema import Table, validate
from specd.unit.parse import ParsedUnit, read_unit
from specd.unit.render import SPEC_FLAGS, TYPED_FLAGS
from specd.unit.syntax import Scope, UnitContext, read_unit_text
from specd.unit.wrappers import unwrap

_FIXED = {"--model": "model", "-m": "model", "--alias": "alias", "-a": "alias", "--host": "host", "--port": "port"}
_BOOLEAN = {"--jinja": "jinja", "--metrics": "metrics"}


def _spec_type(spelling: str) -> str:
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


def _is_value(word: str | None) -> bool:
    """A word that is a flag's value, not the next flag (negative numbers are values)."""
    return word is not None and (not word.startswith("-") or re.fullmatch(r"-\d+(\.\d+)?", word) is not None)


# Units that a manager other than systemd's own unit loader reads differently are refused above;
# these directives are what real units carry besides ExecStart/Environment. specd renders its own
# [Unit]/[Service]/[Install]; the rest is reported so the owner can keep it in a drop-in.
_RENDERED = {("Unit", "Description"), ("Unit", "After"), ("Service", "Type"), ("Install", "WantedBy")}


def _flag_target(name: str, data: dict[str, Any],
                 speculative: dict[str, Any]) -> tuple[dict[str, Any], Table, str, str] | None:
    """Where a flag's value goes: (table, its schema, key, prefix for the report), or None for `args`."""
    typed = {spelling: use.key for use in TYPED_FLAGS for spelling in use.spellings}
    spec_flags = {spelling: use.key for use in SPEC_FLAGS for spelling in use.spellings}
    if name in _FIXED:
        return data, PROFILE_SCHEMA, _FIXED[name], ""
    if name in typed:
        return data, PROFILE_SCHEMA, typed[name], ""
    if name == "--spec-type":
        return speculative, SPECULATIVE_SCHEMA, "type", "speculative."
    if name in spec_flags:
        return speculative, SPECULATIVE_SCHEMA, spec_flags[name], "speculative."
    return None


def _map_flags(argv: list[str], result: ImportResult, speculative: dict[str, Any]) -> list[str]:
    """Typed keys for the flags specd knows with values it checks; everything else, as written, to args."""
    data, rest, index = result.data, [], 0
    while index < len(argv):
        arg = argv[index]
        flag, has_inline, inline = arg.partition("=")
        inline_form = has_inline and flag.startswith("--")
        name = flag if inline_form else arg
        value = inline if inline_form else (argv[index + 1] if index + 1 < len(argv) else None)
        step = 1 if inline_form else 2
        if name in _BOOLEAN:
            data[_BOOLEAN[name]] = True
            result.row(arg, f"{_BOOLEAN[name]} = true")
            index += 1
            continue
        target = _flag_target(name, data, speculative)
        if target is None or value is None or not (inline_form or _is_value(value)):
            rest.append(arg)
            result.row(arg, "args")
            index += 1
            continue
        table, schema, key, prefix = target
        converted = _spec_type(value) if key == "type" else _convert(value, schema.keys[key].kind)
        if key == "alias":
            converted = value.split(",")[0]
        written = " ".join(argv[index:index + step])
        if _accepts(schema, key, converted):
            table[key] = converted
            result.row(written, f"{prefix}{key} = {converted!r}")
        else:
            rest += argv[index:index + step]
            result.row(written, f"args (kept as written: {value!r} is not a value specd checks for {prefix}{key})")
        index += step
    return rest


def _refuse_what_profiles_cannot_express(data: dict[str, Any], rest: list[str], where: str) -> None:
    if "model" not in data:
        present = set(rest)
        if present & {"--models-dir", "--models-preset", "--models-max"}:
            why = "it runs llama-server in router mode (--models-dir/--models-preset), which specd profiles cannot express yet"
        elif present & {"-hf", "--hf-repo", "-hfr", "--hf-file", "-hff"}:
            why = "its model comes from Hugging Face (-hf), which specd profiles cannot express yet"
        else:
            why = "its llama-server command has no -m/--model"
        raise UsageError(f"{where}: {why}; specd profiles need a local model file (-m): keep this unit by hand")
    host = data.get("host")
    if isinstance(host, str) and (host.startswith("/") or host.endswith(".sock")):
        raise UsageError(f"{where}: --host {host} is a Unix socket; specd's health gate and proxy speak TCP: "
                         "listen on 127.0.0.1 and a port, then import")
    if "--host" in rest:
        raise UsageError(f"{where}: its --host is not a host name or address specd can gate; listen on an address "
                         "and a port, then import")


def _fill_defaults(result: ImportResult, speculative: dict[str, Any]) -> None:
    """What llama-server does when a flag is absent, written down, and said."""
    data = result.data
    if speculative and "type" not in speculative and "draft_model" in speculative:
        speculative["type"] = "draft"
        result.row("-md without --spec-type", "speculative.type = 'draft' (the classic draft-model form)")
    if "host" not in data:
        data["host"] = LLAMA_SERVER_DEFAULT_HOST
        result.row("no --host", f"host = {LLAMA_SERVER_DEFAULT_HOST!r} (llama-server's default)")
    if "port" not in data:
        data["port"] = LLAMA_SERVER_DEFAULT_PORT
        result.row("no --port", f"port = {LLAMA_SERVER_DEFAULT_PORT} (llama-server's default)")
    if "alias" not in data:
        data["alias"] = PurePath(str(data["model"])).name
        result.row("no --alias", f"alias = {data['alias']!r} (the model file's name; llama-server reports the "
                                 "model path without --alias): the profile renders it as --alias")
    data.setdefault("metrics", False)


def _report_directives(parsed: ParsedUnit, result: ImportResult) -> None:
    for directive in parsed.directives:
        source = f"{directive.key}={directive.value} ([{directive.section}] line {directive.line})"
        if (directive.section, directive.key) in _RENDERED:
            result.row(source, f"replaced by the {directive.key}= specd renders")
        else:
            result.row(source, "NOT carried: keep it in a drop-in (systemctl edit) — specd renders the unit file only")


def profile_from_unit(text: str, where: str, description: str, context: UnitContext | None = None) -> ImportResult:
    """The profile a unit's llama-server command becomes, and a row for each part of the unit."""
    parsed = read_unit(text, where, context)
    unwrapped = unwrap(parsed.command.argv, parsed.command.environment, where)
    environment = {**parsed.command.environment, **unwrapped.environment}
    result = ImportResult({"description": description, "binary": unwrapped.argv[0]})
    for note in (*parsed.notes, *unwrapped.notes):
        result.row("unit", note)
    speculative: dict[str, Any] = {}
    rest = _map_flags(unwrapped.argv[1:], result, speculative)
    _refuse_what_profiles_cannot_express(result.data, rest, where)
    _fill_defaults(result, speculative)
    if rest:
        result.data["args"] = rest
    if speculative:
        result.data["speculative"] = speculative
    if environment:
        result.data["env"] = dict(environment)
        for name in sorted(environment):
            result.row(f"{name}=...", "env")
    _report_directives(parsed, result)
    return result


def resolve_source(source: str, scope: str) -> Path:
    """`--from`: a path, or the name of an installed unit (template instances included)."""
    path = Path(source)
    if path.exists() or "/" in source:
        return path
    from specd import paths

    directories = ([paths.user_unit_dir(), Path("/etc/systemd/user"), Path("/usr/lib/systemd/user")] if scope == "user"
                   else [paths.SYSTEM_UNIT_DIR, Path("/usr/lib/systemd/system"), Path("/lib/systemd/system")])
    names = [source]
    if "@" in source:  # llama-server@qwen.service is read from llama-server@.service
        stem, _, suffix = source.rpartition(".")
        names.append(stem.split("@", 1)[0] + "@." + suffix)
    for directory in directories:
        for name in names:
            if (directory / name).is_file():
                return directory / name
    raise UsageError(f"no unit file {source} in {', '.join(map(str, directories))}; pass its path to --from")


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
    result = profile_from_unit(text, str(unit_path), f"imported from {unit_name or unit_path}", context)
    document = tomlkit.document()
    document.add(tomlkit.comment(f"Imported by `specd import` from {unit_path}"))
    for key, value in result.data.items():
        document[key] = value
    rendered = tomlkit.dumps(document)
    problems = validate(result.data, PROFILE_SCHEMA, path=target, text=rendered)
    if problems:
        raise UsageError(f"{unit_path} cannot become a valid profile (nothing was written): " + "; ".join(problems))
    atomic_write(target, rendered.encode("utf-8"))
    return target, result
