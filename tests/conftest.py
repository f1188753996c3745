"""Shared fixtures: a private systemd --user manager, the real llama-server, the tiny model."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import tomlkit
from hypothesis import HealthCheck, settings

from specd.deploy.history import History
from specd.deploy.slots import companion_unit
from specd.paths import StateDir
from specd.profiles.config import Deployment, load_config
from specd.setup.sandbox import PrivateSystemd, free_port, private_systemd_env

REPO = Path(__file__).resolve().parent.parent
# Every box's servers run one thread: the suite runs two workers on a 2-core CI box, llama.cpp's thread
# pool spin-waits at every barrier, and with more threads than cores a decode step took 1.7 s instead of
# 45 ms (CI, 2026-11-29); a one-thread server has no barrier to spin at. With a daemon, two one-thread
# servers fit the cores, so `auto` switches go blue-green: a test about the restart path is marked
# `own_threads` and keeps the tiny profiles' own 2 threads (auto then restarts in place).
ONE_THREAD = 1
CACHE = Path(os.environ.get("SPECD_CACHE") or Path.home() / ".cache" / "specd")
LLAMA_SERVER = CACHE / "llama-server" / "0.3.36-cpu" / "build" / "bin" / "llama-server"
TINY_MODEL = CACHE / "models" / "gemma-3-270m-q4_k_m.gguf"
_unit_numbers = itertools.count(1)

# `mutmut run` (pyproject's [tool.mutmut]) runs the tests traced and forked, several times slower:
# its profile keeps Hypothesis from failing a test on its own slowness (--hypothesis-profile=mutation).
settings.register_profile("mutation", deadline=None, suppress_health_check=list(HealthCheck))


def require_real_server() -> None:
    missing = [str(p) for p in (LLAMA_SERVER, TINY_MODEL) if not p.exists()]
    if missing:
        pytest.fail(f"missing {', '.join(missing)}: run scripts/build-llama-server.sh and scripts/get-test-model.sh "
                    "(scripts/test.sh does both)")


@pytest.fixture(scope="session")
def systemd_manager(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateSystemd]:
    os.environ.setdefault("SPECD_CACHE", str(CACHE))
    with private_systemd_env(tmp_path_factory.mktemp("systemd")) as manager:
        yield manager


@dataclass
class Box:
    """One isolated deployment on the private manager: its own unit name, port, profiles, state."""

    manager: PrivateSystemd
    root: Path
    unit: str
    port: int
    profiles_dir: Path
    config_path: Path
    env: dict[str, str]

    @property
    def deployment(self) -> Deployment:
        return load_config(self.config_path).deployment()

    @property
    def unit_path(self) -> Path:
        return self.manager.unit_dir / self.unit

    @property
    def state(self) -> StateDir:
        """The box's state directory (what `specd` run with `env` uses)."""
        return StateDir(Path(self.env["XDG_STATE_HOME"]) / "specd")

    def history(self) -> History:
        return History(self.state.db)

    def specd(self, *args: str, env: dict[str, str] | None = None, timeout: float = 300,
              check: bool = False) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "specd", *args]
        result = subprocess.run(command, env={**self.env, **(env or {})}, capture_output=True, text=True,
                                timeout=timeout, check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"specd {' '.join(args)} exited {result.returncode}:\n"
                                 f"{result.stdout}\n{result.stderr}")
        return result

    def write_profile(self, name: str, text: str) -> Path:
        path = self.profiles_dir / f"{name}.toml"
        path.write_text(text)
        return path

    def edit_profile(self, name: str, **values: object) -> None:
        path = self.profiles_dir / f"{name}.toml"
        document = tomlkit.parse(path.read_text())
        for key, value in values.items():
            document[key] = value
        path.write_text(tomlkit.dumps(document))

    @property
    def green_unit(self) -> str:
        """The deployment's second slot (a blue-green switch starts servers there)."""
        return companion_unit(self.unit)

    def cleanup(self) -> None:
        routed = [p.name for p in self.manager.unit_dir.glob(f"{self.unit.removesuffix('.service')}-route-*.service")]
        for unit in (self.unit, self.green_unit, *routed):  # routing's companions too (specd.deploy.companions)
            subprocess.run(["systemctl", "--user", "stop", unit], env=self.env, capture_output=True, check=False)
            for path in self.manager.unit_dir.glob(f"{unit}*"):
                path.unlink()
        subprocess.run(["systemctl", "--user", "daemon-reload"], env=self.env, capture_output=True, check=False)
        subprocess.run(["systemctl", "--user", "reset-failed", self.unit, self.green_unit], env=self.env,
                       capture_output=True, check=False)


@pytest.fixture
def box(systemd_manager: PrivateSystemd, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        request: pytest.FixtureRequest) -> Iterator[Box]:
    """A deployment with the tiny example profiles, on a free port, with stability_s = 1 and one-thread
    servers (ONE_THREAD; a test marked `own_threads` keeps the profiles' own)."""
    unit = f"llama-test-{os.getpid()}-{next(_unit_numbers)}.service"
    port = free_port()
    profiles_dir = tmp_path / "profiles"
    shutil.copytree(REPO / "profiles" / "tiny", profiles_dir)
    base = profiles_dir / "base.toml"
    document = tomlkit.parse(base.read_text())
    document["port"] = port
    document["stability_s"] = 1
    document["health_timeout_s"] = 60
    if request.node.get_closest_marker("own_threads") is None:
        document["threads"] = ONE_THREAD
    base.write_text(tomlkit.dumps(document))
    config_path = tmp_path / "specd.toml"
    config_path.write_text(f'unit = "{unit}"\nscope = "user"\nprofiles_dir = "{profiles_dir}"\nlock_timeout_s = 2\n')
    state = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    monkeypatch.setenv("SPECD_CONFIG", str(config_path))
    env = {**os.environ, "XDG_STATE_HOME": str(state), "SPECD_CONFIG": str(config_path)}
    result = Box(systemd_manager, tmp_path, unit, port, profiles_dir, config_path, env)
    try:
        yield result
    finally:
        result.cleanup()


def alias_answers(port: int, alias: str = "tiny") -> bool:
    """Does the endpoint on `port` list `alias` right now?"""
    try:
        return bool(httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5).json()["data"][0]["id"] == alias)
    except (httpx.HTTPError, ValueError, KeyError, IndexError):
        return False


@pytest.fixture
def real_server() -> None:
    require_real_server()
