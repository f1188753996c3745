"""Several "boxes" on this machine for the Ansible and Prometheus tests, and ansible-playbook to drive them.

Each box is its own private `systemd --user` manager (its own D-Bus, HOME, XDG dirs, so its own
specd state DB and unit directory), the tiny example profiles on a port of its own, and the real
llama-server. Ansible reaches each one as an inventory host with the local connection; the play's
`environment:` (the inventory's `specd_environment`) points specd and systemctl at that box's
manager, as XDG_RUNTIME_DIR does for a real user on a real box.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomlkit
import yaml

from specd.setup.sandbox import PrivateSystemd, free_port, start_private_systemd
from tests.conftest import REPO

VENV_BIN = Path(sys.executable).parent
COLLECTION_SRC = REPO / "ansible"
CALLBACKS = Path(__file__).parent / "ansible_plugins"
# What a box's processes (specd, its daemon) need to find that box's manager and state.
BOX_ENV_KEYS = ("HOME", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME",
                "DBUS_SESSION_BUS_ADDRESS", "SPECD_CACHE", "SPECD_BOX")


@dataclass
class FleetBox:
    name: str
    manager: PrivateSystemd
    unit: str
    port: int
    metrics_port: int
    profiles_dir: Path
    config_path: Path
    env: dict[str, str]

    @property
    def unit_path(self) -> Path:
        return self.manager.unit_dir / self.unit

    def specd(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([sys.executable, "-m", "specd", *args], env=self.env, capture_output=True, text=True,
                                timeout=timeout, check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"{self.name}: specd {' '.join(args)} exited {result.returncode}:\n"
                                 f"{result.stdout}\n{result.stderr}")
        return result

    def write_profile(self, name: str, text: str) -> Path:
        path = self.profiles_dir / f"{name}.toml"
        path.write_text(text)
        return path

    def status(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.specd("status", "--json", check=False).stdout)
        return data

    def history(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = json.loads(self.specd("history", "--json").stdout)
        return rows

    def config_text(self) -> str:
        return (f'unit = "{self.unit}"\nscope = "user"\nprofiles_dir = "{self.profiles_dir}"\nlock_timeout_s = 60\n\n'
                f'[daemon]\nmetrics_listen = "127.0.0.1:{self.metrics_port}"\nhealth_interval_s = 2\n'
                "failures_before_restart = 3\nrollback_grace_s = 0\n\n[tuner]\nenabled = false\n")

    def host_vars(self) -> dict[str, Any]:
        """This box as an inventory host: local connection, its environment, the role's inputs."""
        environment = {key: self.env[key] for key in BOX_ENV_KEYS if key in self.env}
        return {
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
            "specd_environment": {**environment, "PATH": self.env["PATH"]},
            "specd_metrics_target": f"127.0.0.1:{self.metrics_port}",
            "specd_install_venv": str(Path(sys.prefix)),
            "specd_install_config": self.config_text(),
            "specd_install_environment": environment,
            "specd_install_linger": False,  # no systemd-logind in this container
        }

    def daemon_log(self) -> str:
        result = subprocess.run(["journalctl", "--user", "-u", "specd.service", "-n", "60", "--no-pager"],
                                env=self.env, capture_output=True, text=True, check=False)
        return result.stdout[-4000:]


def _new_box(root: Path, name: str) -> FleetBox:
    manager = start_private_systemd(root / name)
    home = Path(manager.env["HOME"])
    config_dir = Path(manager.env["XDG_CONFIG_HOME"]) / "specd"
    profiles_dir = config_dir / "profiles"
    shutil.copytree(REPO / "profiles" / "tiny", profiles_dir)
    port = free_port()
    base = profiles_dir / "base.toml"
    document = tomlkit.parse(base.read_text())
    document["port"] = port
    document["stability_s"] = 1
    document["health_timeout_s"] = 60
    base.write_text(tomlkit.dumps(document))
    env = {**manager.env, "SPECD_BOX": name,
           "PATH": f"{home / '.local' / 'bin'}:{VENV_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    env.pop("SPECD_CONFIG", None)  # each box reads its own ~/.config/specd/specd.toml
    return FleetBox(name, manager, f"llama-{name}.service", port, free_port(), profiles_dir,
                    config_dir / "specd.toml", env)


@contextmanager
def fleet(root: Path, names: tuple[str, ...]) -> Iterator[list[FleetBox]]:
    boxes: list[FleetBox] = []
    try:
        for name in names:
            boxes.append(_new_box(root, name))
        yield boxes
    finally:
        for box in boxes:
            box.manager.stop()


@dataclass
class PlaybookRun:
    returncode: int
    output: str
    results: list[dict[str, Any]]

    def of(self, host: str, task: str) -> list[dict[str, Any]]:
        return [r for r in self.results if r["host"] == host and r["task"] == task]

    def hosts_with(self, status: str) -> list[str]:
        return sorted({r["host"] for r in self.results if r["status"] == status})

    def changed_hosts(self) -> list[str]:
        return sorted({r["host"] for r in self.results if r["changed"]})


class Ansible:
    """ansible-playbook with the collection built and installed the documented way, in a temp dir."""

    def __init__(self, root: Path, boxes: list[FleetBox]) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.env = {**os.environ, "ANSIBLE_HOME": str(root / "ansible-home"),
                    "ANSIBLE_LOCAL_TEMP": str(root / "local-tmp"), "ANSIBLE_REMOTE_TEMP": str(root / "remote-tmp"),
                    "ANSIBLE_COLLECTIONS_PATH": str(root / "collections"), "ANSIBLE_NOCOLOR": "1",
                    "ANSIBLE_CALLBACK_PLUGINS": str(CALLBACKS), "ANSIBLE_CALLBACKS_ENABLED": "results_file",
                    "ANSIBLE_HOST_KEY_CHECKING": "0", "ANSIBLE_RETRY_FILES_ENABLED": "0",
                    "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
        self.env.pop("SPECD_CONFIG", None)
        self.inventory = root / "inventory.yml"
        self.write_inventory(boxes)
        self._runs = 0

    def install_collection(self) -> Path:
        """`ansible-galaxy collection build` + `install`, as the README says."""
        dist = self.root / "dist"
        self._run(["ansible-galaxy", "collection", "build", "--force", "--output-path", str(dist),
                   str(COLLECTION_SRC)])
        tarball = next(dist.glob("specd-fleet-*.tar.gz"))
        self._run(["ansible-galaxy", "collection", "install", "--force", "-p", str(self.root / "collections"),
                   str(tarball)])
        return tarball

    def _run(self, command: list[str]) -> str:
        result = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=300, check=False)
        assert result.returncode == 0, f"{' '.join(command)}:\n{result.stdout}\n{result.stderr}"
        return result.stdout

    def write_inventory(self, boxes: list[FleetBox], group_vars: dict[str, Any] | None = None,
                        host_vars: dict[str, dict[str, Any]] | None = None) -> None:
        """The group "specd" with one host per box; `host_vars` override a box's (as host_vars/ do)."""
        hosts = {box.name: {**box.host_vars(), **(host_vars or {}).get(box.name, {})} for box in boxes}
        group = {"hosts": hosts, "vars": group_vars or {}}
        self.inventory.write_text(yaml.safe_dump({"specd": group}, sort_keys=True))

    def playbook(self, name: str, extra_vars: dict[str, Any] | None = None, *, check: bool = False,
                 diff: bool = False, timeout: float = 600) -> PlaybookRun:
        self._runs += 1
        results = self.root / f"results-{self._runs}.jsonl"
        variables = self.root / f"vars-{self._runs}.json"
        variables.write_text(json.dumps(extra_vars or {}))
        command = ["ansible-playbook", "-i", str(self.inventory), f"specd.fleet.{name}", "-e", f"@{variables}"]
        command += (["--check"] if check else []) + (["--diff"] if diff else [])
        result = subprocess.run(command, env={**self.env, "SPECD_TEST_RESULTS": str(results)}, capture_output=True,
                                text=True, timeout=timeout, check=False)
        records = [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
        return PlaybookRun(result.returncode, result.stdout + result.stderr, records)
