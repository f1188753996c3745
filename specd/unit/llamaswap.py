"""Read a llama-swap config the way llama-swap does (proxy/config/config.go, LoadConfigFromReader):
one entry per model, its `cmd` with every macro expanded and split into words.

What llama-swap does, and so this does: `${env.NAME}` from the environment (an unset one is an
error); per model, macros substituted once each in reverse order of the list `MODEL_ID, global
macros..., model macros...` (a model macro replaces a global one of the same name in place), so a
macro may use any macro defined before it; `${PORT}` is given only to models whose `cmd` uses it,
counting up from `startPort` (5800) over the model IDs in sorted order; a macro left over is an
error; comment lines are dropped from `cmd`, a trailing `\\` joins lines, and the result is split
with POSIX shell quoting. `proxy` defaults to `http://localhost:${PORT}`.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from specd.errors import UsageError

_MACRO = re.compile(r"\$\{([a-zA-Z0-9_-]+)\}")
_ENV_MACRO = re.compile(r"\$\{env\.([a-zA-Z_][a-zA-Z0-9_]*)\}")
DEFAULT_START_PORT = 5800
DEFAULT_PROXY = "http://localhost:${PORT}"
# What a specd profile has no place for: specd runs one server behind one alias and swaps by profile.
_MODEL_KEYS_NOT_CARRIED = ("ttl", "unlisted", "useModelName", "filters", "checkEndpoint", "cmdStop",
                           "concurrencyLimit", "sendLoadingState", "metadata", "capabilities")
_TOP_KEYS_NOT_CARRIED = ("groups", "hooks", "globalTTL", "profiles", "peers", "apiKeys", "startPort",
                         "healthCheckTimeout", "logLevel", "logToStdout", "logRequests", "metricsMaxInMemory",
                         "captureBuffer", "includeAliasesInList", "sendLoadingState", "listen", "store",
                         "startTimeout", "idleTimeout")


@dataclass(frozen=True)
class SwapModel:
    """One model of a llama-swap config, as llama-swap would run it."""

    name: str  # its ID (the key under models:), what clients ask llama-swap for
    argv: tuple[str, ...]  # the expanded cmd, split into words; () for a proxy-only (remote) model
    environment: tuple[tuple[str, str], ...]
    port: int | None  # what ${PORT} stood for
    proxy: str
    aliases: tuple[str, ...]
    description: str
    not_carried: tuple[str, ...]


@dataclass(frozen=True)
class SwapConfig:
    models: tuple[SwapModel, ...]
    not_carried: tuple[str, ...]


def _load(text: str, where: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        raise UsageError(f"{where}{line}: not valid YAML: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(data, dict) or not isinstance(data.get("models"), dict) or not data["models"]:
        raise UsageError(f"{where}: no `models:` mapping; is this a llama-swap config?")
    return data


def _substitute_env(value: Any, environ: Mapping[str, str], where: str) -> Any:
    if isinstance(value, str):
        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in environ:
                raise UsageError(f"{where}: environment variable '{name}' is not set (the config uses ${{env.{name}}})")
            return environ[name]
        return _ENV_MACRO.sub(replace, value)
    if isinstance(value, dict):
        return {k: _substitute_env(v, environ, where) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute_env(v, environ, where) for v in value]
    return value


def _macro_list(raw: Any, where: str) -> list[tuple[str, str]]:
    if raw is None:
        return []
    if not isinstance(raw, dict):
        raise UsageError(f"{where}: macros must be a mapping")
    entries: list[tuple[str, str]] = []
    for name, value in raw.items():
        if not re.fullmatch(r"[a-zA-Z0-9_-]{1,63}", str(name)) or name in ("PORT", "MODEL_ID"):
            raise UsageError(f"{where}: macro name '{name}' is reserved or not [a-zA-Z0-9_-]")
        if isinstance(value, (dict, list)) or value is None:
            raise UsageError(f"{where}: macro '{name}' must be a string, number or boolean")
        text = str(value).lower() if isinstance(value, bool) else str(value)
        if f"${{{name}}}" in text:
            raise UsageError(f"{where}: macro '{name}' refers to itself")
        entries.append((str(name), text))
    return entries


def _merged(model_id: str, global_macros: list[tuple[str, str]],
            model_macros: list[tuple[str, str]]) -> list[tuple[str, str]]:
    merged = [("MODEL_ID", model_id), *global_macros]
    for name, value in model_macros:
        index = next((i for i, (existing, _) in enumerate(merged) if existing == name), None)
        if index is None:
            merged.append((name, value))
        else:
            merged[index] = (name, value)
    return merged


def _strip_comments(cmd: str) -> str:
    return "\n".join(line for line in cmd.split("\n") if not line.strip().startswith("#"))


def split_command(cmd: str, where: str) -> tuple[str, ...]:
    """llama-swap's SanitizeCommand: comment lines dropped, a trailing backslash joins, POSIX words."""
    lines = []
    for line in cmd.split("\n"):
        trimmed = line.strip()
        if trimmed.startswith("#"):
            continue
        lines.append(trimmed[:-1] + " " if trimmed.endswith("\\") else line)
    try:
        return tuple(shlex.split("\n".join(lines), posix=True))
    except ValueError as exc:
        raise UsageError(f"{where}: cmd cannot be split into words: {exc}") from None


def _model(model_id: str, raw: Mapping[str, Any], global_macros: list[tuple[str, str]], port: int,
           where: str) -> tuple[SwapModel, bool]:
    here = f"{where}: model {model_id}"
    fields = {"cmd": _strip_comments(str(raw.get("cmd") or "")), "proxy": str(raw.get("proxy") or DEFAULT_PROXY)}
    for name, value in reversed(_merged(model_id, global_macros, _macro_list(raw.get("macros"), here))):
        fields = {key: text.replace(f"${{{name}}}", value) for key, text in fields.items()}
    uses_port = "${PORT}" in fields["cmd"]
    if "${PORT}" in fields["proxy"] and not uses_port and fields["cmd"].strip():
        raise UsageError(f"{here}: proxy uses ${{PORT}} but cmd does not")
    if uses_port:
        fields = {key: text.replace("${PORT}", str(port)) for key, text in fields.items()}
    for key, text in fields.items():
        left = _MACRO.search(text)
        if left and not (key == "proxy" and not fields["cmd"].strip()):
            raise UsageError(f"{here}: unknown macro '${{{left.group(1)}}}' in {key}")
    environment = []
    for entry in raw.get("env") or []:
        name, has_value, value = str(entry).partition("=")
        if not has_value:
            raise UsageError(f"{here}: env entry {entry!r} is not NAME=value")
        environment.append((name, value))
    not_carried = tuple(f"{key}: {raw[key]!r} (not carried: specd runs one server at a time)"
                        for key in _MODEL_KEYS_NOT_CARRIED if key in raw)
    description = str(raw.get("description") or raw.get("name") or "")
    model = SwapModel(model_id, split_command(fields["cmd"], here) if fields["cmd"].strip() else (),
                      tuple(environment), port if uses_port else None, fields["proxy"],
                      tuple(str(a) for a in raw.get("aliases") or ()), description, not_carried)
    return model, uses_port


def read_llama_swap(text: str, where: str, environ: Mapping[str, str] | None = None) -> SwapConfig:
    """Every model of a llama-swap config, expanded as llama-swap expands it."""
    data = _substitute_env(_load(text, where), os.environ if environ is None else environ, where)
    global_macros = _macro_list(data.get("macros"), where)
    port = int(data.get("startPort") or DEFAULT_START_PORT)
    models = []
    for model_id in sorted(data["models"], key=str):
        raw = data["models"][model_id]
        if not isinstance(raw, dict):
            raise UsageError(f"{where}: model {model_id} must be a mapping")
        model, used_port = _model(str(model_id), raw, global_macros, port, where)
        port += 1 if used_port else 0
        models.append(model)
    not_carried = tuple(f"{key} (not carried: specd has no equivalent)" for key in _TOP_KEYS_NOT_CARRIED
                        if key in data)
    return SwapConfig(tuple(models), not_carried)
