"""Profile files: `<profiles_dir>/<name>.toml`, one llama-server configuration each.

Loading is a pure pipeline — read, parse (tomlkit, so edits keep comments), validate against
the schema, resolve `inherits`, expand `~` and `${SPECD_CACHE}` in paths — ending in a frozen
`Profile`. Any problem raises ProfileError naming file, line and key; nothing is half-loaded.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomlkit
import tomlkit.exceptions

from specd import paths
from specd.endpoint import Endpoint, is_socket_host, looks_like_socket
from specd.errors import ProfileError
from specd.profiles.engine_keys import VllmSettings, engine_problems, vllm_settings
from specd.profiles.keys import (
    MODEL_SOURCES,
    NAME_PATTERN,
    PROFILE_SCHEMA,
    REQUIRED,
    SPECULATIVE_KEYS,
    TOP_KEYS,
    ProfileKey,
)
from specd.profiles.schema import validate
from specd.profiles.tomlpos import key_line, where

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Speculative:
    """[speculative]: the fields of specd.profiles.keys.SPECULATIVE_KEYS (defaults live there)."""

    type: str
    draft_n_max: int | None
    draft_n_min: int | None
    draft_p_min: float | None
    draft_model: Path | None
    draft_ngl: int | str | None
    draft_hf_repo: str | None
    ngram_simple_size_n: int | None = None
    ngram_simple_size_m: int | None = None
    ngram_simple_min_hits: int | None = None
    ngram_mod_n_match: int | None = None
    ngram_mod_n_min: int | None = None
    ngram_mod_n_max: int | None = None
    autotune: bool = False


@dataclass(frozen=True)
class Directive:
    """A systemd directive the profile carries into the unit, as written (specifiers unexpanded)."""

    section: str
    key: str
    value: str


@dataclass(frozen=True)
class Profile:
    """A loaded profile: the fields of specd.profiles.keys.TOP_KEYS (types here, defaults and
    checks there), plus what loading adds (name, file, env, systemd directives, inheritance)."""

    name: str
    path: Path
    description: str
    binary: Path
    launcher: tuple[str, ...]
    binary_args: tuple[str, ...]
    model: Path | None
    hf_repo: str | None
    hf_file: str | None
    models_dir: Path | None
    models_preset: Path | None
    router: bool
    models_max: int | None
    alias: str | None
    host: str
    port: int | None  # None only for a Unix socket host (check_endpoint)
    implicit: tuple[str, ...]
    api_key: str | None
    api_key_file: Path | None
    ctx_size: int | None
    n_gpu_layers: int | str | None
    threads: int | None
    parallel: int | None
    batch_size: int | None
    ubatch_size: int | None
    flash_attn: str | None
    cache_type_k: str | None
    cache_type_v: str | None
    reasoning_budget: int | None
    jinja: bool
    metrics: bool
    args: tuple[str, ...]
    health_timeout_s: float
    stability_s: float
    speculative: Speculative
    env: tuple[tuple[str, str], ...] = ()
    systemd: tuple[Directive, ...] = ()
    inherits_chain: tuple[str, ...] = ()
    # Path keys as written (after ~ and ${SPECD_CACHE}): the argv gets these bytes, not Path's
    # normalised form (`/a//b` stays `/a//b`), so a rendered unit passes what the profile says.
    written_paths: tuple[tuple[str, str], ...] = ()
    engine: str = "llama-server"  # specd.profiles.engine_keys.ENGINES
    vllm: VllmSettings | None = None  # a vLLM profile's [vllm] table; its speculative method is speculative.type

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint(self.host, self.port)

    @property
    def base_url(self) -> str:
        return self.endpoint.base_url

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


def _is_abstract(path: Path) -> bool:
    """Whether a profile file says `abstract = true` (a file that does not parse counts as not)."""
    try:
        return bool(tomllib.loads(path.read_text(encoding="utf-8")).get("abstract", False))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False


def missing_profile(path: Path, *, switchable: bool) -> ProfileError:
    """'no such profile file', with the closest name and the others there. For a profile to switch
    to, abstract bases are left out: suggesting one would only lead to the next error."""
    there = sorted(p.stem for p in path.parent.glob("*.toml") if not (switchable and _is_abstract(p)))
    close = difflib.get_close_matches(path.stem, there, n=1)
    guess = f" — did you mean '{close[0]}'?" if close else ""
    kind = "profiles to switch to" if switchable else "profiles"
    listing = f"{kind} there: {', '.join(there)}" if there else f"{path.parent} has no {kind}"
    return ProfileError(f"{path}: no such profile file{guess} ({listing})")


def key_origin(profile: Profile, table: str, key: str) -> str:
    """'file line N' of the file in the profile's inheritance chain that sets `key` (the profile's
    own file first), for messages about a value that is valid TOML but wrong on this box."""
    for name in (profile.name, *profile.inherits_chain):
        path = profile.path if name == profile.name else profile.path.with_name(f"{name}.toml")
        try:
            text = path.read_text(encoding="utf-8")
        except OSError:
            continue
        if key_line(text, table, key) is not None:
            return where(path, text, table, key)
    return str(profile.path)


def read_source(path: Path) -> ProfileSource:
    name = path.stem
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise missing_profile(path, switchable=False) from None
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


def _expanded_text(raw: str) -> str:
    return os.path.expanduser(raw.replace("${SPECD_CACHE}", str(paths.cache_dir())))


def _expand(raw: str) -> Path:
    return Path(_expanded_text(raw))


def check_model_source(data: Mapping[str, Any], path: Path, name: str) -> None:
    """Exactly one model source: a local file, a Hugging Face repo, or router mode (dir and/or preset, or
    `router = true`: the models of llama-server's cache)."""
    sources = [key for key in MODEL_SOURCES if key in data]
    router = {"models_dir", "models_preset"} & set(sources)
    if data.get("router") and set(sources) - router:
        raise ProfileError(f"{path}: profile '{name}' sets 'router = true' and {' and '.join(map(repr, sources))}; "
                           "router mode serves many models: drop 'model'/'hf_repo', or 'router'")
    if not sources and not data.get("router"):
        raise ProfileError(f"{path}: profile '{name}' needs a model: 'model' (a GGUF file), 'hf_repo' "
                           "(Hugging Face), 'models_dir'/'models_preset' (router mode) or 'router = true' (router "
                           "mode over llama-server's download cache)")
    if len(sources) > 1 and not (router and len(sources) == len(router)):
        raise ProfileError(f"{path}: profile '{name}' sets {' and '.join(map(repr, sources))}; "
                           "pick one model source")
    if not router and not data.get("router") and "alias" not in data:
        raise ProfileError(f"{path}: profile '{name}' needs 'alias' (the model name clients ask for)")
    if "alias" in data.get("implicit", ()) and "alias" not in data:
        raise ProfileError(f"{path}: profile '{name}' says 'implicit' alias but sets no 'alias' (the id clients see)")
    if "api_key" in data and "api_key_file" in data:
        raise ProfileError(f"{path}: profile '{name}' sets both 'api_key' and 'api_key_file'; pick one")
    if "hf_file" in data and "hf_repo" not in data:
        raise ProfileError(f"{path}: profile '{name}' sets 'hf_file' without 'hf_repo'")


def check_endpoint(data: Mapping[str, Any], path: Path, name: str) -> None:
    """A TCP host needs a port; a Unix socket (specd.endpoint: an absolute path ending in .sock) has none."""
    host = str(data.get("host", ""))
    if looks_like_socket(host) and not is_socket_host(host):
        raise ProfileError(f"{path}: profile '{name}': host {host!r} ends in .sock, so llama-server listens on a Unix "
                           "socket at that path relative to its working directory: write the socket's absolute path")
    if is_socket_host(host) and "port" in data:
        raise ProfileError(f"{path}: profile '{name}' sets host {host!r}, a Unix socket, and port {data['port']}: "
                           "llama-server ignores the port on a socket; drop 'port'")
    if is_socket_host(host) and data.get("engine", "llama-server") != "llama-server":
        raise ProfileError(f"{path}: profile '{name}': host {host!r} is a Unix socket, which specd knows of "
                           "llama-server only; give it a TCP host and port")
    if not is_socket_host(host) and "port" not in data:
        raise ProfileError(f"{path}: profile '{name}' needs 'port' (or a Unix socket host: an absolute path "
                           "ending in .sock)")


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
        path = profile_path(profiles_dir, current)
        if not chain and not allow_abstract and not path.exists():
            raise missing_profile(path, switchable=True)
        source = read_source(path)
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
    return profile_from_data(data, top.path, name, tuple(s.name for s in chain[1:]))


def profile_from_data(data: Mapping[str, Any], path: Path, name: str, inherits_chain: tuple[str, ...] = ()) -> Profile:
    """The Profile of validated, merged keys: the checks that span several keys, then the values.
    `specd import` runs it on what it is about to write, so a profile it writes is one that loads."""
    problems = engine_problems(data, path, name)
    if problems:
        raise ProfileError("\n".join(problems))
    check_model_source(data, path, name)
    check_endpoint(data, path, name)
    vllm = vllm_settings(data, _expanded_text)
    spec = data.get("speculative", {}) if vllm is None else {"type": vllm.method}
    if vllm is None and spec.get("type") in ("draft", "dflash", "eagle3") and not {"draft_model",
                                                                                  "draft_hf_repo"} & set(spec):
        raise ProfileError(f"{path}: [speculative] type '{spec['type']}' needs draft_model (or draft_hf_repo)")
    base = _working_directory(data, spec, path, name)
    return Profile(
        name=name,
        path=path,
        **{key.name: _value(key, data, base) for key in TOP_KEYS if key.name not in ("inherits", "abstract")},
        speculative=Speculative(**{key.name: _value(key, spec, base) for key in SPECULATIVE_KEYS}),
        env=tuple(sorted(data.get("env", {}).items())),
        systemd=_directives(data.get("systemd", {})),
        inherits_chain=inherits_chain,
        written_paths=tuple((f"{prefix}{key.name}", _expanded_text(str(table[key.name])))
                            for prefix, table, keys in (("", data, TOP_KEYS), ("speculative.", spec, SPECULATIVE_KEYS))
                            for key in keys if key.path and key.name in table),
        vllm=vllm,
    )


def _working_directory(data: Mapping[str, Any], spec: Mapping[str, Any], path: Path, name: str) -> Path | None:
    """Where llama-server resolves a relative path a profile gives it (as a unit may: `-m models/x.gguf`):
    the [systemd.Service] WorkingDirectory= the rendered unit carries. None when no path is relative; a
    relative path without an absolute WorkingDirectory= is refused, since the file would be unknown."""
    relative = [(key.name, str(table[key.name])) for table, keys in ((data, TOP_KEYS), (spec, SPECULATIVE_KEYS))
                for key in keys if key.path and key.name != "binary" and key.name in table
                and not _expand(str(table[key.name])).is_absolute()]
    if not relative:
        return None
    service = data.get("systemd", {}).get("Service", {})
    given = service.get("WorkingDirectory") if isinstance(service, Mapping) else None
    written = str(given[-1] if isinstance(given, list) and given else given or "")
    directory = Path(os.path.expanduser(written.removeprefix("-")))
    if not directory.is_absolute():
        key, value = relative[0]
        raise ProfileError(f"{path}: profile '{name}': '{key}' is {value!r}, a relative path, which llama-server "
                           "opens relative to its working directory; set [systemd.Service] WorkingDirectory= to an "
                           "absolute directory" + (f" (not {written!r})" if written else "") + ", or write the path "
                           "absolute")
    return directory


def _value(key: ProfileKey, data: Mapping[str, Any], base: Path | None = None) -> Any:
    """A key's value as the Profile holds it: paths expanded (a relative one under `base`, the server's working
    directory: the argv keeps the words as written, written_paths), numbers as their kind, lists as tuples."""
    if key.name not in data:
        return key.default
    value = data[key.name]
    if key.path:
        expanded = _expand(str(value))
        return base / expanded if base is not None and key.name != "binary" else expanded
    if key.kind is float:
        return float(value)
    if isinstance(value, list):
        return tuple(value)
    return value


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
