"""`specd import`: turn a hand-written llama-server unit into a profile file.

The inverse of render: known flags become typed keys, speculative flags the [speculative]
table, Environment= the [env] table, and everything else stays in `args`, in order.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tomlkit

from specd.errors import UsageError
from specd.profiles.flags import SPEC_TYPE_SPELLINGS
from specd.profiles.load import PROFILE_SCHEMA, SPECULATIVE_SCHEMA, profile_path
from specd.unit.render import SPEC_FLAGS, TYPED_FLAGS
from specd.profiles.schema import validate
from specd.deploy.unitfiles import atomic_write
from specd.unit.parse import parse_unit

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


def profile_from_unit(text: str, where: str, description: str) -> dict[str, Any]:
    command = parse_unit(text, where)
    typed = {spelling: use.key for use in TYPED_FLAGS for spelling in use.spellings}
    spec_flags = {spelling: use.key for use in SPEC_FLAGS for spelling in use.spellings}
    data: dict[str, Any] = {"description": description, "binary": command.argv[0]}
    speculative: dict[str, Any] = {}
    rest: list[str] = []
    argv = command.argv[1:]
    index = 0
    while index < len(argv):
        arg = argv[index]
        flag, has_inline, inline = arg.partition("=")
        name = flag if has_inline and flag.startswith("--") else arg
        value = inline if has_inline and flag.startswith("--") else (argv[index + 1] if index + 1 < len(argv) else None)
        step = 1 if has_inline and flag.startswith("--") else 2
        if name in _BOOLEAN:
            data[_BOOLEAN[name]] = True
            index += 1
            continue
        target: tuple[dict[str, Any], str, Any] | None = None
        if name in _FIXED:
            key = _FIXED[name]
            target = (data, key, PROFILE_SCHEMA.keys[key].kind)
        elif name in typed:
            target = (data, typed[name], PROFILE_SCHEMA.keys[typed[name]].kind)
        elif name == "--spec-type":
            target = (speculative, "type", str)
        elif name in spec_flags:
            target = (speculative, spec_flags[name], SPECULATIVE_SCHEMA.keys[spec_flags[name]].kind)
        if target is not None and value is not None:
            table, key, kind = target
            table[key] = _spec_type(value) if key == "type" else _convert(value, kind)
            if key == "alias":
                table[key] = value.split(",")[0]
            index += step
            continue
        rest.append(arg)
        index += 1
    if "metrics" not in data:
        data["metrics"] = False
    if rest:
        data["args"] = rest
    if speculative:
        data["speculative"] = speculative
    if command.environment:
        data["env"] = dict(command.environment)
    return data


def import_unit(unit_path: Path, profiles_dir: Path, name: str, *, force: bool = False) -> Path:
    try:
        text = unit_path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{unit_path}: cannot read: {exc.strerror}") from exc
    target = profile_path(profiles_dir, name)
    if target.exists() and not force:
        raise UsageError(f"{target} exists; pick another name or pass --force")
    data = profile_from_unit(text, str(unit_path), f"imported from {unit_path}")
    document = tomlkit.document()
    document.add(tomlkit.comment(f"Imported by `specd import` from {unit_path}"))
    for key, value in data.items():
        document[key] = value
    rendered = tomlkit.dumps(document)
    problems = validate(data, PROFILE_SCHEMA, path=target, text=rendered)
    if problems:
        raise UsageError(f"{unit_path} cannot become a valid profile:\n" + "\n".join(problems))
    atomic_write(target, rendered.encode("utf-8"))
    return target
