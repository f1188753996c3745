"""Where specd keeps its files, following the XDG base-directory spec.

Resolved at call time (never cached) so tests and the daemon can point HOME/XDG_* elsewhere.
"""

from __future__ import annotations

import os
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
    return state_dir() / "specd.db"


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
    """Where a profile's api_key is kept for the server (0600, named by its hash): the unit, the
    unit store and the history then hold only this path, never the key."""
    import hashlib

    return state_dir() / "secrets" / f"api-key-{hashlib.sha256(key.encode()).hexdigest()[:16]}"
