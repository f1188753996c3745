"""Read a llama-swap config file into one entry per model, the way llama-swap itself reads it.

Pure: text and environment in, a `SwapConfig` out; nothing on disk is touched. The semantics follow
llama-swap's own loader (github.com/mostlygeek/llama-swap, internal/config):

- load.go `LoadConfigFromReader`: `${env.NAME}` is replaced in the raw text before YAML parsing
  (values escaped for double-quoted YAML). A missing variable makes llama-swap refuse the whole
  config; specd refuses only the models that use it, naming the variable, and imports the others.
- macros.go `resolveConfigMacros`: macros are substituted in reverse declaration order, a model's
  own `macros:` overriding globals in place and `${MODEL_ID}` first in the list (so last to be
  replaced); one pass, so a macro may only use macros declared before it. `${PORT}` is allocated
  from `startPort` (default 5800) in sorted model-ID order, only to models whose cmd uses it; a
  proxy defaults to `http://localhost:${PORT}`; the keys of `filters.setParamsByID` are macro
  targets too. Any `${name}` left afterwards is an error of that model (a refusal of it, with the
  reason, not of the config). The macro rules live in swap_macros.py.
- commands.go `SanitizeCommand`/`StripComments`: comment lines dropped, trailing `\\` joined, and
  words split with github.com/billziss-gh/golib/shlex `Posix.Split` (swap_cmd.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import yaml

from specd.errors import UsageError
from specd.unit.swap_cmd import sanitize_command, split_posix, strip_comments
from specd.unit.swap_macros import (
    Macros,
    Value,
    check_leftovers,
    go_str,
    macro_list,
    merge,
    strings,
    substitute,
)

__all__ = ["SwapConfig", "SwapModel", "read_llama_swap", "split_posix"]

START_PORT = 5800
DEFAULT_PROXY = "http://localhost:${PORT}"
_ENV_USE = re.compile(r"\$\{env\.([a-zA-Z_][a-zA-Z0-9_]*)\}")

_MODEL_REASONS = {
    "ttl": "specd keeps one server running",
    "unloadTimeout": "specd stops the server through systemd",
    "cmdStop": "specd stops the server through systemd",
    "checkEndpoint": "specd's health gate probes /health",
    "healthCheckTimeout": "specd's health gate has its own timeout",
    "unlisted": "specd lists every profile",
    "useModelName": "specd does not rewrite the model name",
    "concurrencyLimit": "specd does not limit concurrent requests",
    "filters": "specd does not rewrite requests",
    "metadata": "specd has no model metadata",
    "sendLoadingState": "specd sends no loading state",
    "timeouts": "specd's proxy has its own timeouts",
    "compat": "specd's proxy has no compat switches",
    "capabilities": "specd reads capabilities from the server",
}
_TOP_REASONS = {
    "globalTTL": "specd keeps one server running",
    "groups": "specd runs one model at a time",
    "matrix": "specd runs one model at a time",
    "routing": "specd runs one model at a time",
    "profiles": "specd profiles are one server each",
    "hooks": "specd has no start-up preload hooks",
    "healthCheckTimeout": "specd's health gate has its own timeout",
    "apiKeys": "specd's proxy does not check API keys",
    "peers": "specd does not forward to peers",
}
_MODEL_CARRIED = {"cmd", "proxy", "env", "aliases", "name", "description", "macros"}
_TOP_CARRIED = {"models", "macros", "startPort"}


@dataclass(frozen=True)
class SwapModel:
    name: str  # the key under models:
    argv: tuple[str, ...]  # cmd expanded, comments/continuations removed, split; () when no cmd
    environment: tuple[tuple[str, str], ...]  # from env:
    port: int | None  # the port ${PORT} stood for (None if cmd has no ${PORT})
    proxy: str | None  # expanded proxy URL
    aliases: tuple[str, ...]
    description: str  # name/description if given
    not_carried: tuple[str, ...]  # human-readable notes, one per key specd does not carry
    refused: str = ""  # why this model cannot be read (an unset ${env.X}, an unknown macro): the others still are


@dataclass(frozen=True)
class SwapConfig:
    models: tuple[SwapModel, ...]
    not_carried: tuple[str, ...]  # top-level keys not carried (groups, hooks, globalTTL, ...)


def read_llama_swap(text: str, where: str, environ: Mapping[str, str]) -> SwapConfig:
    """Parse llama-swap config `text` (read from `where`, named in errors) with `environ` for ${env.X}."""
    substituted, unset = _substitute_env(text, where, environ)
    raw = _load(substituted, where)
    macros = macro_list(raw.get("macros"), where, "macros")
    models_raw = {} if raw.get("models") is None else raw["models"]
    if not isinstance(models_raw, dict):
        raise UsageError(f"{where}: 'models' must be a mapping of model ID to settings")
    port = substitute(raw.get("startPort", START_PORT), macros)
    if isinstance(port, bool) or not isinstance(port, int) or port < 1:
        raise UsageError(f"{where}: startPort must be a whole number of at least 1, not {port!r}")
    models: list[SwapModel] = []
    for model_id in sorted(models_raw):  # llama-swap allocates ports in sorted model-ID order
        try:
            model, port = _model(model_id, models_raw[model_id], macros, port, where, unset)
        except UsageError as error:
            model = SwapModel(model_id, (), (), None, None, (), "", (), error.message.removeprefix(
                f"{where}: model {model_id}: "))
            port += _uses_port(models_raw[model_id], macros)  # the models after it keep llama-swap's ports
        models.append(model)
    models = _check_aliases(models)
    notes = tuple(_note(k, v, _TOP_REASONS) for k, v in raw.items() if k not in _TOP_CARRIED)
    return SwapConfig(models=tuple(models), not_carried=notes)


def _load(text: str, where: str) -> dict[str, Value]:
    try:
        data = yaml.load(text, Loader=_Loader)  # a SafeLoader (see _Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f" line {mark.line + 1}" if mark is not None else ""
        raise UsageError(f"{where}{line}: not valid YAML: {exc.problem or exc.context}") from exc
    except yaml.YAMLError as exc:
        raise UsageError(f"{where}: not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(f"{where}: a llama-swap config is a mapping at the top level")
    return data


# A SafeLoader resolving scalars the way Go's yaml.v3 does into `any`: only true/false are booleans
# (`-fa on` stays "on") and dates stay text. Built with type() so it type-checks with or without stubs.
_Loader: Any = type("_Loader", (yaml.SafeLoader,), {})
_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:timestamp")]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def _substitute_env(text: str, where: str, environ: Mapping[str, str]) -> tuple[str, frozenset[str]]:
    """${env.NAME} in the raw text, as llama-swap's substituteEnvMacros (comments are not scanned).
    An unset variable stays as written and is returned: the models that use it are refused, not the config."""
    parsed = _load(text, where)
    unset: set[str] = set()
    for name in dict.fromkeys(m for s in strings(parsed) for m in _ENV_USE.findall(s)):
        slug = "${env." + name + "}"
        value = environ.get(name)
        if value is None or any(c in value for c in "\n\r\x00"):
            unset.add(name)
            continue
        text = text.replace(slug, value.replace("\\", "\\\\").replace('"', '\\"'))
    return text, frozenset(unset)


def _mapping(value: Value) -> dict[str, Value]:
    return value if isinstance(value, dict) else {}


def _model(model_id: str, value: Value, glob: Macros, port: int, where: str,
           unset: frozenset[str] = frozenset()) -> tuple[SwapModel, int]:
    here = f"{where}: model {model_id}"
    if not isinstance(value, dict):
        raise UsageError(f"{here}: the settings must be a mapping")
    local = macro_list(value.get("macros"), where, f"model {model_id}")
    used = sorted({name for text in strings(substitute(dict(value), merge(model_id, glob, local)))
                   for name in _ENV_USE.findall(text)} & unset)
    if used:
        raise UsageError(f"{here}: environment variable {', '.join(map(repr, used))} is not set (or holds a newline): "
                         "this model's settings use it (llama-swap itself would refuse the whole config); set it "
                         "and import again")
    settings: dict[str, Value] = {k: v for k, v in value.items() if k != "macros"}
    had_cmd = settings.get("cmd") is not None
    for key in ("cmd", "cmdStop"):
        if isinstance(settings.get(key), str):
            settings[key] = strip_comments(str(settings[key]))
    if settings.get("proxy") is None:
        settings["proxy"] = DEFAULT_PROXY
    macros = merge(model_id, glob, local)
    settings = _mapping(substitute(settings, macros))
    _substitute_parameter_keys(settings, macros)
    cmd = _text(settings.get("cmd"), here, "cmd")
    proxy = _text(settings.get("proxy"), here, "proxy")
    assigned: int | None = None
    if "${PORT}" in cmd:
        assigned, port = port, port + 1
        settings = _mapping(substitute(settings, [("PORT", assigned)]))
        _substitute_parameter_keys(settings, [("PORT", assigned)])
        cmd, proxy = _text(settings.get("cmd"), here, "cmd"), _text(settings.get("proxy"), here, "proxy")
    elif "${PORT}" in proxy:
        what = "proxy uses ${PORT} but cmd does not - ${PORT} is only available when used in cmd"
        if "proxy" not in value or value.get("proxy") is None:
            what = f"cmd does not use ${{PORT}} and there is no proxy: (llama-swap's default is {DEFAULT_PROXY})"
        raise UsageError(f"{here}: {what}")
    check_leftovers(settings, here, [n for n, _ in glob + local])
    argv = sanitize_command(cmd) if had_cmd else ()
    if had_cmd and not argv:
        raise UsageError(f"{here}: cmd is empty")
    notes = [_note(k, v, _MODEL_REASONS) for k, v in settings.items() if k not in _MODEL_CARRIED]
    if not had_cmd:
        notes.insert(0, f"no cmd: llama-swap only proxies this model to {proxy}")
    label = " - ".join(_text(settings.get(k), here, k) for k in ("name", "description") if settings.get(k))
    model = SwapModel(
        name=model_id,
        argv=argv,
        environment=_environment(settings.get("env"), here),
        port=assigned,
        proxy=proxy,
        aliases=tuple(_text(a, here, "aliases") for a in _list(settings.get("aliases"), here, "aliases")),
        description=label,
        not_carried=tuple(notes),
    )
    return model, port


def _text(value: Value, here: str, key: str) -> str:
    if value is None:
        return ""
    if isinstance(value, (list, dict)):
        raise UsageError(f"{here}: {key} must be text, not a {'list' if isinstance(value, list) else 'mapping'}")
    return go_str(value)


def _list(value: Value, here: str, key: str) -> list[Value]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise UsageError(f"{here}: {key} must be a list")
    return value


def _environment(value: Value, here: str) -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    for entry in _list(value, here, "env"):
        name, equals, rest = _text(entry, here, "env").partition("=")
        if not equals or not name:
            raise UsageError(f"{here}: env entry {entry!r} is not NAME=value")
        out.append((name, rest))
    return tuple(out)


def _uses_port(value: Value, glob: Macros) -> bool:
    """Whether a model (one that could not be read) asks for ${PORT} in its cmd, directly or through a macro."""
    if not isinstance(value, dict):
        return False
    try:
        local = macro_list(value.get("macros"), "", "")
    except UsageError:
        local = []
    cmd = substitute(value.get("cmd"), merge("", glob, local))
    return isinstance(cmd, str) and "${PORT}" in cmd


def _substitute_parameter_keys(settings: dict[str, Value], macros: Macros) -> None:
    """substituteSetParamsByIDKeys: the keys of filters.setParamsByID are model IDs, macros allowed
    (`${MODEL_ID}:thinking`); other mapping keys are not macro targets."""
    filters = settings.get("filters")
    params = filters.get("setParamsByID") if isinstance(filters, dict) else None
    if not isinstance(filters, dict) or not isinstance(params, dict):
        return
    resolved: dict[str, Value] = {}
    for key, item in params.items():
        for name, macro in reversed(macros):
            key = key.replace("${" + name + "}", go_str(macro))
        resolved[key] = item
    filters["setParamsByID"] = resolved


def _check_aliases(models: list[SwapModel]) -> list[SwapModel]:
    """An alias two models claim: llama-swap refuses the config; specd refuses the later model, naming both."""
    owner: dict[str, str] = {}
    checked: list[SwapModel] = []
    for model in models:
        taken = next((alias for alias in model.aliases if alias in owner), None)
        if taken is not None and not model.refused:
            model = replace(model, refused=f"alias {taken} is also used by model {owner[taken]}")
        owner.update({alias: model.name for alias in model.aliases if alias not in owner})
        checked.append(model)
    return checked


def _note(key: str, value: Value, reasons: Mapping[str, str]) -> str:
    """One line per key not carried; mappings show their keys and lists their length (no secrets)."""
    if isinstance(value, dict):
        shown = "{" + ", ".join(map(str, value)) + "}"
    elif isinstance(value, list):
        shown = f"[{len(value)} entries]"
    else:
        shown = "null" if value is None else go_str(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return f"not carried: {key}={shown} ({reasons.get(key, 'no specd equivalent')})"


