"""Profile files: `<profiles_dir>/<name>.toml`, one llama-server configuration each.

Loading is a pure pipeline — read, parse (tomlkit, so edits keep comments), validate against
the schema, resolve `inherits`, expand `~` and `${SPECD_CACHE}` in paths — ending in a frozen
`Profile`. Any problem raises ProfileError naming file, line and key; nothing is half-loaded.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomlkit
import tomlkit.exceptions

from specd import paths
from specd.errors import ProfileError
from specd.profiles.schema import Key, Table, in_range, list_of_strings, matches, validate
from specd.profiles.tomlpos import where

NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ABS_PATH = matches(r"(/|~|\$\{SPECD_CACHE\}).*", "an absolute path (or start with ~ or ${SPECD_CACHE})")
# systemd runs a bare command name from its own search path (systemd.service(5), "Command lines").
_BINARY = matches(r"(/|~|\$\{SPECD_CACHE\}).*|[A-Za-z0-9._+-]+",
                  "an absolute path (or ~, ${SPECD_CACHE}), or a command name systemd finds in its PATH")
_HF_REPO = matches(r"[A-Za-z0-9._-]+/[A-Za-z0-9._-]+(:[A-Za-z0-9._-]+)?", "<user>/<model>[:quant], as llama-server's -hf takes it")
# Values are checked against the profile's binary (its --help) at preflight, not against a fixed list:
# forks add cache types (turbo4, ...) and spec types, builds spell booleans differently.
_TOKEN = matches(r"[A-Za-z0-9_.+-]{1,64}", "one word of letters, digits and _ . + -")
_SPEC_TYPE = matches(r"[A-Za-z0-9_.:=,+-]{1,200}",
                     "a speculative type, a chain (draft-dflash,ngram-mod) or with parameters (mtp:n_max=2)")


def _layers(value: Any) -> str | None:
    if isinstance(value, bool):
        return f"must be a number of layers, 'all' or 'auto', not {value!r}"
    if isinstance(value, int):
        return in_range(-1, 100000)(value)
    return None if value in ("all", "auto") else f"must be a number of layers, 'all' or 'auto', not {value!r}"


def _directive_values(value: Any) -> str | None:
    return list_of_strings(value) if isinstance(value, list) else None


_SECTION = Table(keys={}, free_form=Key((str, list), _directive_values))
SYSTEMD_SCHEMA = Table(keys={}, tables={"Unit": _SECTION, "Service": _SECTION, "Install": _SECTION})
_ALIAS = matches(r"[A-Za-z0-9][A-Za-z0-9._:/+-]{0,127}(,[A-Za-z0-9][A-Za-z0-9._:/+-]{0,127})*",
                 "letters, digits and . _ : / + - (no spaces); several names separated by commas")
_HOST = matches(r"[A-Za-z0-9.:\[\]-]{1,253}", "a host name or IP address")

SPECULATIVE_SCHEMA = Table(keys={
    "type": Key(str, _SPEC_TYPE, "speculative decoding type: specd's name, or the binary's own spelling"),
    "draft_n_max": Key(int, in_range(0, 256)),
    "draft_n_min": Key(int, in_range(0, 256)),
    "draft_p_min": Key(float, in_range(0.0, 1.0)),
    "draft_model": Key(str, _ABS_PATH),
    "draft_ngl": Key((int, str), _layers),
    "draft_hf_repo": Key(str, _HF_REPO, "draft model from Hugging Face (-hfd)"),
})
PROFILE_SCHEMA = Table(
    keys={
        "description": Key(str),
        "inherits": Key(str, matches(NAME_PATTERN, "a profile name")),
        "abstract": Key(bool, doc="a base for others; never switched to"),
        "binary": Key(str, _BINARY),
        "launcher": Key(list, list_of_strings, "words run in front of the binary: toolbox run -c BOX, numactl ..."),
        "model": Key(str, _ABS_PATH, "a local GGUF file (-m)"),
        "hf_repo": Key(str, _HF_REPO, "a model from Hugging Face (-hf); downloaded on first start"),
        "hf_file": Key(str, doc="the file in hf_repo (-hff), instead of the quant"),
        "models_dir": Key(str, _ABS_PATH, "router mode: a directory of models (--models-dir)"),
        "models_preset": Key(str, _ABS_PATH, "router mode: an INI file of model presets (--models-preset)"),
        "models_max": Key(int, in_range(0, 1024), "router mode: models loaded at once (--models-max)"),
        "api_key": Key(str, doc="clients must send it; the gate, bench and verify do (never logged)"),
        "api_key_file": Key(str, _ABS_PATH, doc="file of API keys, one per line (--api-key-file)"),
        "alias": Key(str, _ALIAS),
        "host": Key(str, _HOST),
        "port": Key(int, in_range(1, 65535)),
        "args": Key(list, list_of_strings),
        "health_timeout_s": Key(float, in_range(1, 24 * 3600)),
        "stability_s": Key(float, in_range(0, 600)),
        "ctx_size": Key(int, in_range(0, 1 << 24)),
        "n_gpu_layers": Key((int, str), _layers),
        "threads": Key(int, in_range(1, 1024)),
        "parallel": Key(int, in_range(1, 1024)),
        "batch_size": Key(int, in_range(1, 1 << 20)),
        "ubatch_size": Key(int, in_range(1, 1 << 20)),
        "flash_attn": Key(str, _TOKEN),
        "cache_type_k": Key(str, _TOKEN),
        "cache_type_v": Key(str, _TOKEN),
        "reasoning_budget": Key(int, in_range(-1, 1 << 20)),
        "jinja": Key(bool),
        "metrics": Key(bool),
    },
    tables={
        "speculative": SPECULATIVE_SCHEMA,
        "env": Table(keys={}, free_form=Key(str)),
        "systemd": SYSTEMD_SCHEMA,
    },
)
REQUIRED = ("binary", "port")
MODEL_SOURCES = ("model", "hf_repo", "models_dir", "models_preset")


@dataclass(frozen=True)
class Speculative:
    type: str = "none"
    draft_n_max: int | None = None
    draft_n_min: int | None = None
    draft_p_min: float | None = None
    draft_model: Path | None = None
    draft_ngl: int | str | None = None
    draft_hf_repo: str | None = None


@dataclass(frozen=True)
class Directive:
    """A systemd directive the profile carries into the unit, as written (specifiers unexpanded)."""

    section: str
    key: str
    value: str


@dataclass(frozen=True)
class Profile:
    name: str
    path: Path
    binary: Path
    port: int
    model: Path | None = None
    alias: str | None = None
    hf_repo: str | None = None
    hf_file: str | None = None
    models_dir: Path | None = None
    models_preset: Path | None = None
    models_max: int | None = None
    api_key: str | None = None
    api_key_file: Path | None = None
    host: str = "127.0.0.1"
    launcher: tuple[str, ...] = ()
    description: str = ""
    args: tuple[str, ...] = ()
    health_timeout_s: float = 600.0
    stability_s: float = 5.0
    ctx_size: int | None = None
    n_gpu_layers: int | str | None = None
    threads: int | None = None
    parallel: int | None = None
    batch_size: int | None = None
    ubatch_size: int | None = None
    flash_attn: str | None = None
    cache_type_k: str | None = None
    cache_type_v: str | None = None
    reasoning_budget: int | None = None
    jinja: bool = False
    metrics: bool = True
    speculative: Speculative = field(default_factory=Speculative)
    env: tuple[tuple[str, str], ...] = ()
    systemd: tuple[Directive, ...] = ()
    inherits_chain: tuple[str, ...] = ()

    @property
    def router(self) -> bool:
        """Router mode: llama-server serves the models of a directory or preset file, no -m."""
        return self.models_dir is not None or self.models_preset is not None

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host and not self.host.startswith("[") else self.host
        return f"http://{host}:{self.port}"

    @property
    def files(self) -> tuple[Path, ...]:
        """Every file this profile's server reads: for preflight and permission checks."""
        files = (self.binary if self.binary.is_absolute() else None, self.model, self.speculative.draft_model,
                 self.models_preset, self.api_key_file)
        return tuple(f for f in files if f is not None)


@dataclass(frozen=True)
class ProfileSource:
    """A profile file as written, before inheritance: for `profiles`, the watcher and edits."""

    name: str
    path: Path
    text: str
    data: dict[str, Any]


def profile_path(profiles_dir: Path, name: str) -> Path:
    if not re.fullmatch(NAME_PATTERN, name):
        raise ProfileError(f"'{name}' is not a valid profile name (letters, digits, . _ - ; up to 64)")
    return profiles_dir / f"{name}.toml"


def read_source(path: Path) -> ProfileSource:
    name = path.stem
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ProfileError(f"{path}: no such profile file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ProfileError(f"{path}: cannot read: {exc}") from exc
    try:
        document = tomlkit.parse(text)
    except tomlkit.exceptions.ParseError as exc:
        raise ProfileError(f"{path} line {exc.line}: TOML syntax error: {exc}") from None
    data = document.unwrap()
    problems = validate(data, PROFILE_SCHEMA, path=path, text=text)
    for env_name in data.get("env", {}) if isinstance(data.get("env"), Mapping) else {}:
        if not _ENV_NAME.fullmatch(env_name):
            problems.append(f"{path}: [env] name {env_name!r} is not a valid environment variable name")
    service = data.get("systemd", {}).get("Service", {}) if isinstance(data.get("systemd"), Mapping) else {}
    for key, instead in (("ExecStart", "the profile's keys and args"), ("Environment", "[env]")):
        if isinstance(service, Mapping) and key in service:
            problems.append(f"{where(path, text, 'systemd.Service', key)}: [systemd.Service] cannot set {key}=: "
                            f"specd renders it from {instead}")
    if problems:
        raise ProfileError("\n".join(problems))
    return ProfileSource(name=name, path=path, text=text, data=data)


def _merge(base: dict[str, Any], child: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in child.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


def _expand(raw: str) -> Path:
    expanded = raw.replace("${SPECD_CACHE}", str(paths.cache_dir()))
    return Path(os.path.expanduser(expanded))


def _optional_path(data: Mapping[str, Any], key: str) -> Path | None:
    return _expand(data[key]) if key in data else None


def _check_model_source(data: Mapping[str, Any], path: Path, name: str) -> None:
    """Exactly one model source: a local file, a Hugging Face repo, or router mode (dir and/or preset)."""
    sources = [key for key in MODEL_SOURCES if key in data]
    router = {"models_dir", "models_preset"} & set(sources)
    if not sources:
        raise ProfileError(f"{path}: profile '{name}' needs a model: 'model' (a GGUF file), 'hf_repo' "
                           "(Hugging Face) or 'models_dir'/'models_preset' (router mode)")
    if len(sources) > 1 and not (router and len(sources) == len(router)):
        raise ProfileError(f"{path}: profile '{name}' sets {' and '.join(map(repr, sources))}; "
                           "pick one model source")
    if not router and "alias" not in data:
        raise ProfileError(f"{path}: profile '{name}' needs 'alias' (the model name clients ask for)")
    if "api_key" in data and "api_key_file" in data:
        raise ProfileError(f"{path}: profile '{name}' sets both 'api_key' and 'api_key_file'; pick one")
    if "hf_file" in data and "hf_repo" not in data:
        raise ProfileError(f"{path}: profile '{name}' sets 'hf_file' without 'hf_repo'")


def _directives(systemd: Mapping[str, Any]) -> tuple[Directive, ...]:
    carried: list[Directive] = []
    for section, entries in systemd.items():
        for key, value in entries.items():
            values = value if isinstance(value, list) else [value]
            carried += [Directive(section, key, str(v)) for v in values]
    return tuple(carried)


def load_profile(profiles_dir: Path, name: str, *, allow_abstract: bool = False) -> Profile:
    """Load `name` with everything it inherits; raise ProfileError on any problem."""
    chain: list[ProfileSource] = []
    current: str | None = name
    while current is not None:
        if current in (source.name for source in chain):
            cycle = " -> ".join([s.name for s in chain] + [current])
            raise ProfileError(f"profile '{name}': inheritance cycle {cycle}")
        source = read_source(profile_path(profiles_dir, current))
        chain.append(source)
        parent = source.data.get("inherits")
        current = str(parent) if parent is not None else None

    data: dict[str, Any] = {}
    for source in reversed(chain):
        data = _merge(data, source.data)
    top = chain[0]
    if top.data.get("abstract", False) and not allow_abstract:
        raise ProfileError(f"{top.path}: profile '{name}' is abstract (a base for others); pick one that inherits it")
    missing = [key for key in REQUIRED if key not in data]
    if missing:
        raise ProfileError(
            f"{top.path}: profile '{name}' needs {', '.join(repr(k) for k in missing)}"
            + (f" (not set here nor in {', '.join(s.name for s in chain[1:])})" if len(chain) > 1 else "")
        )
    _check_model_source(data, top.path, name)
    spec = data.get("speculative", {})
    if spec.get("type") in ("draft", "dflash", "eagle3") and not {"draft_model", "draft_hf_repo"} & set(spec):
        raise ProfileError(f"{top.path}: [speculative] type '{spec['type']}' needs draft_model (or draft_hf_repo)")
    return Profile(
        name=name,
        path=top.path,
        binary=_expand(data["binary"]),
        model=_optional_path(data, "model"),
        alias=data.get("alias"),
        hf_repo=data.get("hf_repo"),
        hf_file=data.get("hf_file"),
        models_dir=_optional_path(data, "models_dir"),
        models_preset=_optional_path(data, "models_preset"),
        models_max=data.get("models_max"),
        api_key=data.get("api_key"),
        api_key_file=_optional_path(data, "api_key_file"),
        port=data["port"],
        launcher=tuple(data.get("launcher", ())),
        host=data.get("host", "127.0.0.1"),
        description=data.get("description", ""),
        args=tuple(data.get("args", ())),
        health_timeout_s=float(data.get("health_timeout_s", 600.0)),
        stability_s=float(data.get("stability_s", 5.0)),
        ctx_size=data.get("ctx_size"),
        n_gpu_layers=data.get("n_gpu_layers"),
        threads=data.get("threads"),
        parallel=data.get("parallel"),
        batch_size=data.get("batch_size"),
        ubatch_size=data.get("ubatch_size"),
        flash_attn=data.get("flash_attn"),
        cache_type_k=data.get("cache_type_k"),
        cache_type_v=data.get("cache_type_v"),
        reasoning_budget=data.get("reasoning_budget"),
        jinja=bool(data.get("jinja", False)),
        metrics=bool(data.get("metrics", True)),
        speculative=Speculative(
            type=spec.get("type", "none"),
            draft_n_max=spec.get("draft_n_max"),
            draft_n_min=spec.get("draft_n_min"),
            draft_p_min=float(spec["draft_p_min"]) if "draft_p_min" in spec else None,
            draft_model=_expand(spec["draft_model"]) if "draft_model" in spec else None,
            draft_ngl=spec.get("draft_ngl"),
            draft_hf_repo=spec.get("draft_hf_repo"),
        ),
        env=tuple(sorted(data.get("env", {}).items())),
        systemd=_directives(data.get("systemd", {})),
        inherits_chain=tuple(s.name for s in chain[1:]),
    )


@dataclass(frozen=True)
class ProfileListing:
    name: str
    path: Path
    description: str
    abstract: bool
    error: str | None


def list_profiles(profiles_dir: Path) -> list[ProfileListing]:
    """Every `*.toml` in the dir, with its validation error if any (never raises for one bad file)."""
    listings: list[ProfileListing] = []
    for path in sorted(profiles_dir.glob("*.toml")):
        try:
            source = read_source(path)
            abstract = bool(source.data.get("abstract", False))
            if not abstract:
                load_profile(profiles_dir, path.stem)
            listings.append(ProfileListing(path.stem, path, str(source.data.get("description", "")), abstract, None))
        except ProfileError as exc:
            listings.append(ProfileListing(path.stem, path, "", False, exc.message))
    return listings
