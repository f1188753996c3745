"""specd.toml: where the config is, what it says, and the deployments it describes.

Search order: `--config`, then `$SPECD_CONFIG`, then `$XDG_CONFIG_HOME/specd/specd.toml`.
Top-level `unit`, `scope`, `profiles_dir` are the shorthand for one deployment; several go in
`[[deployment]]` tables, and `--unit` picks one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

import tomlkit
import tomlkit.exceptions

from specd import paths
from specd.errors import ConfigError
from specd.profiles.axes import axes_problem
from specd.profiles.schema import Key, Table, in_range, matches, one_of, validate
from specd.profiles.tomlpos import where as key_place

_UNIT = matches(r"[A-Za-z0-9:_.\\@-]{1,200}\.service", "a unit name ending in .service")
_LISTEN = matches(r"(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):[0-9]{1,5}", "host:port")

PROXY_SCHEMA = Table(keys={
    "listen": Key(str, _LISTEN, "host:port clients use; the active profile's server is the backend"),
    "hold_timeout_s": Key(float, in_range(0, 3600), "how long a request is held while the backend restarts"),
    "capture_bodies": Key(bool, doc="keep request bodies (files 0600) so the tuner can replay them"),
    "capture_max_bytes": Key(int, in_range(0, 1 << 30), "largest body kept"),
    "spare_port": Key(int, in_range(1, 65535), "the port a blue-green switch starts the new server on when the "
                      "old one holds the profile's"),
})
ROUTING_SCHEMA = Table(keys={
    "profiles": Key(list, doc="profiles kept running beside the serving one while routing is on (`specd route on`)",
                    ),
    "mode": Key(str, one_of("auto", "servers", "per-request"),
                "servers: a companion server per extra profile; per-request: one server, each class's draft "
                "settings stamped on its requests (only where the binary honours them); auto: per-request when "
                "the probe finds it works, else servers"),
    "busy_at": Key(int, in_range(1, 1024), "requests in flight at which a server counts as busy, where the table has "
                                           "no load measurements"),
    "sticky_s": Key(float, in_range(0, 86400), "how long a conversation stays on the server that holds its prefix"),
    "port": Key(int, in_range(1, 65535), "the first port companions listen on"),
    "drain_timeout_s": Key(float, in_range(0, 3600), "how long `route off` waits for a companion's requests"),
})
DEPLOYMENT_KEYS = {
    "unit": Key(str, _UNIT, "the llama-server unit specd owns (required)"),
    "scope": Key(str, one_of("user", "system"),
                 "where the unit lives: user (~/.config/systemd/user) or system (/etc/systemd/system)"),
    "profiles_dir": Key(str, doc="where the profile files are (required; relative paths are from specd.toml)"),
    "backups_keep": Key(int, in_range(1, 1000), "`.pre-*` copies of the unit kept beside it"),
    "lock_timeout_s": Key(float, in_range(0, 3600), "how long a command waits for another's lock"),
}
CONFIG_SCHEMA = Table(
    keys={**DEPLOYMENT_KEYS, "deployment": Key(list, doc="[[deployment]] tables: several units on one box")},
    tables={
        "proxy": PROXY_SCHEMA,
        "routing": ROUTING_SCHEMA,
        "daemon": Table(keys={
            "health_interval_s": Key(float, in_range(1, 3600), "seconds between health checks of the endpoint"),
            "failures_before_restart": Key(int, in_range(1, 100), "failed checks in a row before acting"),
            "rollback_grace_s": Key(float, in_range(0, 86400),
                                    "within this long after a switch, a failure rolls back instead of restarting"),
            "housekeeping_interval_s": Key(float, in_range(60, 86400 * 7), "pruning of backups, history, traffic"),
            "schedule_check_s": Key(float, in_range(1, 3600), "seconds between checks of the per-period pins "
                                                              "(`specd pin NAME --period`)"),
            "metrics_listen": Key(str, _LISTEN, "host:port for read-only /metrics and /status"),
            "http_listen": Key(str, _LISTEN, "host:port of the status page (loopback unless a token file is set)"),
            "http_token_file": Key(str, doc="the status page's action token (0600); required off loopback"),
            "max_held_body_bytes": Key(int, in_range(1 << 20, 1 << 40),
                                       "request body bytes all proxies hold for clients at once; past it a "
                                       "request is answered 503"),
        }),
        "notify": Table(keys={
            "urls": Key(list, doc="apprise URLs (ntfy://, gotify://, matrix://, discord://, mailto://, json://)"),
            "min_interval_s": Key(float, in_range(0, 86400), "the least time between two messages of one kind"),
            "health_lost_minutes": Key(float, in_range(0, 10000), "notify when the endpoint is down this long"),
            "timeout_s": Key(float, in_range(1, 600), "the longest one notification may take"),
        }),
        "tuner": Table(keys={
            "enabled": Key(bool, doc="run the nightly tuning job"),
            "cron": Key(str, doc="when, as a crontab line (a sixth, leading field gives the second)"),
            "idle_minutes": Key(float, in_range(0, 10000), "only after this long without traffic"),
            "budget_minutes": Key(float, in_range(1, 10000), "the most a run may take"),
            "margin": Key(float, in_range(0, 10), "the wall-clock gain a switch needs, 0.05 = 5%"),
            "n": Key(int, in_range(1, 1000), "requests per profile"),
            "max_n": Key(int, in_range(1, 100000), "the most requests per profile while the evidence is undecided "
                                                   "(budget_minutes usually ends sampling first)"),
            "workload": Key(str, doc="recent (recorded traffic), a built-in name or a JSONL file"),
            "candidates": Key(list, doc="profiles to compare"),
            "sweep": Key(list, axes_problem, "vary the active profile's [speculative] keys instead of comparing "
                                             "candidates, as `specd tune --sweep` does: [\"draft_n_max=2..8\"]"),
        }),
    },
)
DEPLOYMENT_SCHEMA = Table(keys=DEPLOYMENT_KEYS, tables={"proxy": PROXY_SCHEMA, "routing": ROUTING_SCHEMA})


DEFAULT_HOLD_TIMEOUT_S = 120.0  # how long the proxy holds a request while the backend restarts
DEFAULT_HELD_BODY_BYTES = 128 * 1024 * 1024  # request bodies held for clients, daemon-wide (specd.proxy.http1.bodies)


@dataclass(frozen=True)
class ProxyConfig:
    listen_host: str = "127.0.0.1"
    listen_port: int = 8080
    hold_timeout_s: float = DEFAULT_HOLD_TIMEOUT_S
    capture_bodies: bool = False
    capture_max_bytes: int = 1 << 20
    spare_port: int | None = None  # None: the profile's port + 1


RoutingMode = Literal["auto", "servers", "per-request"]


@dataclass(frozen=True)
class RoutingConfig:
    configured: bool = False  # specd.toml has a [routing] table: the night learns the routing table
    profiles: tuple[str, ...] = ()  # () : the profiles the routing table names
    mode: RoutingMode = "auto"
    busy_at: int = 4
    sticky_s: float = 600.0
    port: int | None = None  # None: the serving profile's port + 2
    drain_timeout_s: float = 300.0


@dataclass(frozen=True)
class DaemonConfig:
    health_interval_s: float = 15.0
    failures_before_restart: int = 3
    rollback_grace_s: float = 600.0
    housekeeping_interval_s: float = 3600.0
    schedule_check_s: float = 60.0
    metrics_listen: str | None = None
    http_listen: str | None = None
    http_token_file: Path | None = None
    max_held_body_bytes: int = DEFAULT_HELD_BODY_BYTES


@dataclass(frozen=True)
class NotifyConfig:
    urls: tuple[str, ...] = ()
    min_interval_s: float = 300.0
    health_lost_minutes: float = 10.0
    timeout_s: float = 20.0


CAP_FACTOR = 32  # the tuner samples an undecided candidate up to 32 x n requests: in practice the time budget ends it


@dataclass(frozen=True)
class TunerConfig:
    enabled: bool = True
    cron: str = "30 3 * * *"
    idle_minutes: float = 30.0
    budget_minutes: float = 60.0
    margin: float = 0.05
    n: int = 10
    max_n: int | None = None  # None: CAP_FACTOR x n
    workload: str = "recent"
    candidates: tuple[str, ...] = ()
    sweep: tuple[str, ...] = ()  # axes, as `specd tune --sweep` takes them (specd.profiles.axes)


Scope = Literal["user", "system"]  # which systemd manager owns the unit


@dataclass(frozen=True)
class Deployment:
    unit: str
    scope: Scope
    profiles_dir: Path
    backups_keep: int = 10
    lock_timeout_s: float = 10.0
    proxy: ProxyConfig | None = None
    routing: RoutingConfig = field(default_factory=RoutingConfig)

    @property
    def name(self) -> str:
        return self.unit.removesuffix(".service")

    @property
    def unit_dir(self) -> Path:
        return paths.user_unit_dir() if self.scope == "user" else paths.SYSTEM_UNIT_DIR

    @property
    def unit_path(self) -> Path:
        return self.unit_dir / self.unit


@dataclass(frozen=True)
class Config:
    path: Path
    deployments: tuple[Deployment, ...]
    daemon: DaemonConfig = field(default_factory=DaemonConfig)
    tuner: TunerConfig = field(default_factory=TunerConfig)
    notify: NotifyConfig = field(default_factory=NotifyConfig)

    def deployment(self, unit: str | None = None) -> Deployment:
        if unit is None:
            if len(self.deployments) == 1:
                return self.deployments[0]
            names = ", ".join(d.unit for d in self.deployments)
            raise ConfigError(f"{self.path}: several deployments ({names}); pick one with --unit")
        wanted = unit if unit.endswith(".service") else f"{unit}.service"
        for deployment in self.deployments:
            if deployment.unit == wanted:
                return deployment
        names = ", ".join(d.unit for d in self.deployments)
        raise ConfigError(f"{self.path}: no deployment for unit '{wanted}' (configured: {names})")


def resolve_config_path(explicit: Path | None = None) -> Path:
    if explicit is not None:
        return explicit
    env = os.environ.get("SPECD_CONFIG")
    if env:
        return Path(env)
    return paths.default_config_path()


def _proxy(raw: Mapping[str, Any] | None) -> ProxyConfig | None:
    if raw is None:
        return None
    defaults = ProxyConfig()
    listen = str(raw.get("listen", f"{defaults.listen_host}:{defaults.listen_port}"))
    host, _, port = listen.rpartition(":")
    return ProxyConfig(
        listen_host=host.strip("[]"),
        listen_port=int(port),
        hold_timeout_s=float(raw.get("hold_timeout_s", defaults.hold_timeout_s)),
        capture_bodies=bool(raw.get("capture_bodies", defaults.capture_bodies)),
        capture_max_bytes=int(raw.get("capture_max_bytes", defaults.capture_max_bytes)),
        spare_port=int(raw["spare_port"]) if "spare_port" in raw else None,
    )


def _routing(raw: Mapping[str, Any] | None) -> RoutingConfig:
    if raw is None:
        return RoutingConfig()
    values = dict(raw)
    if "profiles" in values:
        values["profiles"] = tuple(str(p) for p in values["profiles"])
    return RoutingConfig(configured=True, **values)


def _deployment(raw: Mapping[str, Any], base_dir: Path, where: str, proxy: ProxyConfig | None,
                routing: RoutingConfig) -> Deployment:
    for key in ("unit", "profiles_dir"):
        if key not in raw:
            raise ConfigError(f"{where}: '{key}' is required")
    profiles_dir = Path(os.path.expanduser(str(raw["profiles_dir"])))
    if not profiles_dir.is_absolute():
        profiles_dir = base_dir / profiles_dir
    return Deployment(
        unit=str(raw["unit"]),
        scope=cast(Scope, str(raw.get("scope", "user"))),  # validated against the schema at load
        profiles_dir=profiles_dir,
        backups_keep=int(raw.get("backups_keep", 10)),
        lock_timeout_s=float(raw.get("lock_timeout_s", 10.0)),
        proxy=_proxy(raw["proxy"]) if "proxy" in raw else proxy,
        routing=_routing(raw["routing"]) if "routing" in raw else routing,
    )


def _daemon(raw: Mapping[str, Any], base_dir: Path) -> DaemonConfig:
    values = dict(raw)
    if "http_token_file" in values:
        token_file = Path(os.path.expanduser(str(values["http_token_file"])))
        values["http_token_file"] = token_file if token_file.is_absolute() else base_dir / token_file
    return DaemonConfig(**values)


def _notify(raw: Mapping[str, Any]) -> NotifyConfig:
    values = dict(raw)
    if "urls" in values:
        values["urls"] = tuple(str(url) for url in values["urls"])
    return NotifyConfig(**values)


def load_config(explicit: Path | None = None) -> Config:
    path = resolve_config_path(explicit)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            f"no config at {path}",
            hint="run `specd quickstart`, or write it with unit, scope and profiles_dir (see README)",
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from exc
    try:
        data = tomlkit.parse(text).unwrap()
    except tomlkit.exceptions.ParseError as exc:
        raise ConfigError(f"{path} line {exc.line}: TOML syntax error: {exc}") from None
    problems = validate(data, CONFIG_SCHEMA, path=path, text=text)
    entries = data.get("deployment", [])
    for index, entry in enumerate(entries if isinstance(entries, list) else []):
        if not isinstance(entry, Mapping):
            problems.append(f"{path}: [[deployment]] #{index + 1} must be a table")
            continue
        problems += validate(entry, DEPLOYMENT_SCHEMA, path=path, text=text, table="deployment")
    if problems:
        raise ConfigError("\n".join(problems))

    top_proxy = _proxy(data.get("proxy"))
    top_routing = _routing(data.get("routing"))
    deployments: list[Deployment] = []
    if "unit" in data or "profiles_dir" in data:
        deployments.append(_deployment(data, path.parent, str(path), top_proxy, top_routing))
    for index, entry in enumerate(entries):
        deployments.append(_deployment(entry, path.parent, f"{path} [[deployment]] #{index + 1}", top_proxy,
                                       top_routing))
    if not deployments:
        raise ConfigError(f"{path}: no deployment: set unit and profiles_dir (or add [[deployment]] tables)")
    units = [d.unit for d in deployments]
    duplicates = sorted({u for u in units if units.count(u) > 1})
    if duplicates:
        raise ConfigError(f"{path}: unit {', '.join(duplicates)} is configured twice")

    return Config(
        path=path,
        deployments=tuple(deployments),
        daemon=_daemon(data.get("daemon", {}), path.parent),
        tuner=_tuner(data.get("tuner", {}), path, text),
        notify=_notify(data.get("notify", {})),
    )


def _tuner(raw: Mapping[str, Any], path: Path, text: str) -> TunerConfig:
    lists = {key: tuple(str(item) for item in raw[key]) for key in ("candidates", "sweep") if key in raw}
    tuner = TunerConfig(**{**raw, **lists})
    if tuner.max_n is not None and tuner.max_n < tuner.n:
        raise ConfigError(f"{key_place(path, text, 'tuner', 'max_n')}: 'tuner.max_n' ({tuner.max_n}) must be at least "
                          f"'tuner.n' ({tuner.n}): the first look is at n requests per profile")
    return tuner


def _shown(value: object, name: str = "") -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if value == () and name == "urls":
        return "none"
    if value == () and name == "sweep":
        return "off"
    return "off" if value is None else "all that validate" if value == () else str(value)


def config_key_table() -> str:
    """The README's table of specd.toml keys: docs from the schema, defaults from the dataclasses."""
    defaults: dict[str, object] = {"proxy": ProxyConfig(), "routing": RoutingConfig(), "daemon": DaemonConfig(),
                                   "tuner": TunerConfig(), "notify": NotifyConfig()}
    top = Deployment("", "user", Path())
    rows = ["| key | meaning | default |", "|---|---|---|"]
    for name, key in CONFIG_SCHEMA.keys.items():
        default = _shown(getattr(top, name)) if name in ("scope", "backups_keep", "lock_timeout_s") else ""
        rows.append(f"| `{name}` | {key.doc} | {default} |")
    for table, schema in CONFIG_SCHEMA.tables.items():
        instance = defaults[table]
        for name, key in schema.keys.items():
            value = (f"{instance.listen_host}:{instance.listen_port}" if isinstance(instance, ProxyConfig)
                     and name == "listen" else "the profile's port + 1" if name == "spare_port"
                     else "the serving profile's port + 2" if isinstance(instance, RoutingConfig) and name == "port"
                     else "the profiles the table names" if isinstance(instance, RoutingConfig) and name == "profiles"
                     else f"{CAP_FACTOR} x n" if isinstance(instance, TunerConfig) and name == "max_n"
                     else _shown(getattr(instance, name), name))
            rows.append(f"| `[{table}] {name}` | {key.doc} | {value} |")
    return "\n".join(rows) + "\n"
