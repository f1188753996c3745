"""The Ansible collection as a collection: it builds and installs with ansible-galaxy, passes
ansible-lint's production profile, every module's documentation parses and names exactly the
options its argument spec takes, and the Prometheus file-SD example is what the
prometheus_targets playbook writes from the example inventory. (ansible-test sanity needs to
download pip's bootstrap script, which this machine cannot; ansible-lint runs offline.)"""

from __future__ import annotations

import importlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.system.fleet_rig import COLLECTION_SRC, Ansible

MODULES = ("specd_profile", "specd_switch", "specd_rollback", "specd_facts")


@pytest.fixture(scope="module")
def ansible(tmp_path_factory: pytest.TempPathFactory) -> Ansible:
    runner = Ansible(tmp_path_factory.mktemp("collection"), [])
    runner.install_collection()
    return runner


def test_ansible_lint_production_profile_passes(tmp_path: Path) -> None:
    tree = tmp_path / "ansible_collections" / "specd" / "fleet"
    shutil.copytree(COLLECTION_SRC, tree)
    result = subprocess.run([str(Path(sys.executable).parent / "ansible-lint"), "--nocolor"], cwd=tree,
                            env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path)},
                            capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-6000:]
    assert "Profile 'production' was required, and it passed" in result.stdout + result.stderr


def _doc(ansible: Ansible, module: str) -> dict[str, Any]:
    result = subprocess.run(["ansible-doc", "--json", "-t", "module", f"specd.fleet.{module}"], env=ansible.env,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0 and "WARNING" not in result.stderr, result.stderr
    doc: dict[str, Any] = json.loads(result.stdout)[f"specd.fleet.{module}"]
    return doc


@pytest.mark.parametrize("module", MODULES)
def test_module_documentation_matches_its_argument_spec(ansible: Ansible, module: str) -> None:
    doc = _doc(ansible, module)
    assert doc["examples"].strip() and doc["return"] is not None
    sys.path.insert(0, ansible.env["ANSIBLE_COLLECTIONS_PATH"])
    try:
        spec = importlib.import_module(f"ansible_collections.specd.fleet.plugins.modules.{module}").ARGUMENT_SPEC
    finally:
        sys.path.remove(ansible.env["ANSIBLE_COLLECTIONS_PATH"])
    options = doc["doc"]["options"]
    assert sorted(options) == sorted(spec)
    for name, argument in spec.items():
        documented = options[name]
        assert documented.get("type", "str") == argument.get("type", "str"), name
        assert bool(documented.get("required")) == bool(argument.get("required")), name
        assert documented.get("default") == argument.get("default"), name
        assert documented.get("choices") == argument.get("choices"), name


def test_file_sd_example_is_what_the_playbook_writes_from_the_example_inventory(ansible: Ansible,
                                                                                 tmp_path: Path) -> None:
    written = tmp_path / "specd.json"
    result = subprocess.run(
        ["ansible-playbook", "-i", str(COLLECTION_SRC / "examples" / "inventory.yml"), "specd.fleet.prometheus_targets",
         "-e", f"specd_file_sd_path={written}", "-e", "ansible_connection=local",
         "-e", f"ansible_python_interpreter={sys.executable}"],
        env=ansible.env, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    example = COLLECTION_SRC / "examples" / "prometheus" / "specd.json"
    assert json.loads(written.read_text()) == json.loads(example.read_text())
    assert sorted(group["labels"]["box"] for group in json.loads(written.read_text())) == ["gpu-a", "gpu-b", "gpu-c"]


def test_install_role_installs_specd_from_a_wheel_into_a_fresh_venv(ansible: Ansible, tmp_path: Path) -> None:
    """The role's pip path: a wheel built from this checkout, copied and installed with its
    dependencies (pip's own index and cache), `specd` linked into ~/.local/bin, specd.toml written.
    The daemon and linger parts run in test_ansible_fleet.py's boxes; here they are off (no manager)."""
    wheels = tmp_path / "wheels"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                            str(wheels), str(COLLECTION_SRC.parent)], capture_output=True, text=True, timeout=600,
                           check=False)
    assert built.returncode == 0, built.stderr[-4000:]
    wheel = next(wheels.glob("specd-*.whl"))
    home = tmp_path / "home"
    home.mkdir()
    config = 'unit = "llama-server.service"\nscope = "user"\nprofiles_dir = "profiles"\n'
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(json.dumps({"specd": {"hosts": {"fresh": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "specd_environment": {"HOME": str(home), "PATH": "/usr/bin:/bin"},
        "specd_install_source": str(wheel), "specd_install_python": sys.executable,
        "specd_install_config": config, "specd_install_daemon": False, "specd_install_linger": False}}}}))

    # a fresh box: no XDG_* of the test session's private manager (the role writes specd.toml under the
    # box's XDG_CONFIG_HOME when it has one; run after other system tests, this one inherited theirs)
    fresh = {key: value for key, value in ansible.env.items()
             if not key.startswith("XDG_") and key != "DBUS_SESSION_BUS_ADDRESS"}

    def install() -> subprocess.CompletedProcess[str]:
        return subprocess.run(["ansible-playbook", "-i", str(inventory), "specd.fleet.install"], env=fresh,
                              capture_output=True, text=True, timeout=900, check=False)

    first = install()
    assert first.returncode == 0, first.stdout[-6000:] + first.stderr[-3000:]
    specd = home / ".local" / "bin" / "specd"
    assert specd.resolve() == home / ".local" / "share" / "specd" / "venv" / "bin" / "specd"
    version = subprocess.run([str(specd), "--version"], capture_output=True, text=True, timeout=120, check=False)
    assert version.stdout.strip() == "specd 0.1.0", version.stderr
    assert (home / ".config" / "specd" / "specd.toml").read_text() == config
    second = install()
    assert second.returncode == 0 and "changed=0" in second.stdout, second.stdout[-6000:]


def test_the_readme_shows_the_rollout_playbook_as_shipped() -> None:
    readme = (COLLECTION_SRC.parent / "README.md").read_text()
    shown = next(yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", readme, re.DOTALL)
                 if "Roll a specd profile out" in block)
    shipped = yaml.safe_load((COLLECTION_SRC / "playbooks" / "rollout.yml").read_text())
    assert shown[0] == {**shipped[0], "tasks": shipped[0]["tasks"][:2]}  # the README leaves out the report task
