"""Where specd keeps its files, following the XDG base-directory spec.

Resolved at call time (never cached) so tests and the daemon can point HOME/XDG_* elsewhere.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path


def _xdg(var: str, fallback: str) -> Path:
    value = os.environ.get(var)
    if value and os.path.isabs(value):
        return Path(value)
    return Path.home() / fallback


def config_home() -> Path:
    return _xdg("XDG_CONFIG_HOME", ".config")


def state_dir() -> Path:
    """SQLite history, intent records, locks, captured bodies."""
    return _xdg("XDG_STATE_HOME", ".local/state") / "specd"


def cache_dir() -> Path:
    """Builds, the test model, parsed --help of each binary. SPECD_CACHE overrides."""
    override = os.environ.get("SPECD_CACHE")
    if override:
        return Path(override)
    return _xdg("XDG_CACHE_HOME", ".cache") / "specd"


def db_path() -> Path:
    return StateDir.from_environment().db


@dataclass(frozen=True)
class StateDir:
    """Every file specd keeps in its state directory, named in one place. The composition root
    (`specd.context`) builds one and passes it down; tests pass one under a tmp dir."""

    root: Path

    @classmethod
    def from_environment(cls) -> StateDir:
        return cls(state_dir())

    @property
    def db(self) -> Path:
        """SQLite: history, events, traffic, bench results, pins."""
        return self.root / "specd.db"

    def intent(self, unit: str) -> Path:
        """The record of a switch or rollback in progress."""
        return self.root / "intents" / f"{unit}.json"

    def candidate_intent(self, unit: str) -> Path:
        """The record of a shadow bench's candidate running in the free slot (specd.deploy.candidate)."""
        return self.root / "intents" / f"{unit}.candidate.json"

    def slot_pointer(self, unit: str) -> Path:
        """Which slot (blue: the unit itself, green: its companion) serves; no file means blue."""
        return self.root / "slots" / f"{unit}.json"

    def lock(self, unit: str) -> Path:
        return self.root / "locks" / f"{unit}.lock"

    def routing(self, unit: str) -> Path:
        """Routing on or off, the resident companion servers, the learned table (specd.routing.state)."""
        return self.root / "routing" / f"{unit}.json"

    def unit_store(self, deployment: str) -> Path:
        """Every unit text specd installed or saw, by content hash (what rollback restores)."""
        return self.root / "units" / deployment

    def capture(self, deployment: str) -> Path:
        """Request bodies the proxy captured (0600), when `capture_bodies` is on."""
        return self.root / "capture" / deployment

    def api_key_file(self, key: str) -> Path:
        """Where a profile's api_key is kept for the server (0600, named by its hash): the unit, the
        unit store and the history then hold only this path, never the key."""
        return self.root / "secrets" / f"api-key-{hashlib.sha256(key.encode()).hexdigest()[:16]}"

    def server_output(self, unit: str) -> Path:
        """llama-server's output on a box where no systemd-journald runs: the rendered unit appends
        it here (`StandardOutput=append:`) and a failed switch shows its last lines."""
        return self.root / f"{unit}.log"

    @property
    def daemon_socket(self) -> Path:
        return self.root / "daemon.sock"

    @property
    def daemon_status(self) -> Path:
        return self.root / "daemon.json"

    @property
    def daemon_lock(self) -> Path:
        return self.root / "daemon.lock"

    @property
    def web_token(self) -> Path:
        """The status page's action token (0600), unless `[daemon] http_token_file` names another."""
        return self.root / "web-token"

    @property
    def quickstart_manager(self) -> Path:
        """The private `systemd --user` quickstart keeps running on a box without a user manager."""
        return self.root / "quickstart-systemd"


def default_config_path() -> Path:
    return config_home() / "specd" / "specd.toml"


def user_unit_dir() -> Path:
    return config_home() / "systemd" / "user"


SYSTEM_UNIT_DIR = Path("/etc/systemd/system")


# Files that ship with specd: in a wheel they are the packages specd.units / specd.scripts /
# specd.examples (see pyproject's package-dir); in a source checkout they are the top-level folders.
SHIPPED = {"units": "specd.units", "scripts": "specd.scripts", "profiles": "specd.examples"}


def shipped(folder: str, *parts: str) -> Path:
    """A file or folder that ships with specd: `shipped("units", "llama-server.service.in")`."""
    from importlib.resources import files

    checkout = Path(__file__).resolve().parents[1] / folder
    if checkout.is_dir():
        return checkout.joinpath(*parts)
    package = SHIPPED[folder]
    if parts and folder == "profiles":  # package names cannot hold dots: profiles/qwen3.6-27b is qwen3_6_27b
        package = f"{package}.{parts[0].replace('.', '_').replace('-', '_')}"
        parts = parts[1:]
    return Path(str(files(package).joinpath(*parts)))


def api_key_file(key: str) -> Path:
    """`StateDir.api_key_file` of the environment's state dir: what a rendered unit names."""
    return StateDir.from_environment().api_key_file(key)


def server_output_pattern() -> str:
    """`StateDir.server_output` of the environment's state dir for any unit, as a rendered unit
    names it: `%n` is systemd's specifier for the unit's own name (blue and green slots each get
    their file); a `%` in the directory is doubled so systemd reads it as written."""
    return str(StateDir.from_environment().root).replace("%", "%%") + "/%n.log"
