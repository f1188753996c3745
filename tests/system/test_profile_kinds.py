"""Profiles for the setups people run besides `-m FILE`: an API key, router mode, a launcher in
front of llama-server, and systemd directives the unit must keep. Each one is switched to for real
(private systemd, the real llama-server, the tiny model) and the health gate has to pass."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import pytest

from specd import paths
from tests.conftest import Box

pytestmark = [pytest.mark.systemd, pytest.mark.llama, pytest.mark.usefixtures("real_server")]

BINARY = "${SPECD_CACHE}/llama-server/0.3.36-cpu/build/bin/llama-server"
MODEL = paths.cache_dir() / "models" / "gemma-3-270m-q4_k_m.gguf"


def _show(box: Box, *properties: str) -> dict[str, str]:
    result = subprocess.run(["systemctl", "--user", "show", box.unit, *(f"-p{p}" for p in properties)],
                            env=box.env, capture_output=True, text=True, check=True)
    shown: dict[str, str] = {}
    for line in result.stdout.splitlines():  # a list property (ExecStartPre=) prints one line per entry
        key, _, value = line.partition("=")
        shown[key] = f"{shown[key]}\n{value}" if key in shown else value
    return shown


def _everything_specd_wrote(box: Box) -> str:
    """The text of every file in specd's state directory (history, unit store, events, intents)
    but the 0600 key file the server reads."""
    state = Path(box.env["XDG_STATE_HOME"])
    return "".join(p.read_bytes().decode("utf-8", "replace") for p in state.rglob("*")
                   if p.is_file() and p.parent.name != "secrets")


def test_an_api_key_profile_is_gated_with_its_key_and_the_key_is_never_written_down(box: Box) -> None:
    secret = "sk-specd-test-3f9a"
    box.write_profile("keyed", f'inherits = "base"\napi_key = "{secret}"\n')
    switched = box.specd("switch", "keyed")
    assert switched.returncode == 0, switched.stderr
    url = f"http://127.0.0.1:{box.port}/v1/models"
    assert httpx.get(url, timeout=10).status_code == 401
    assert httpx.get(url, headers={"Authorization": f"Bearer {secret}"}, timeout=10).status_code == 200
    status = box.specd("status", "--json")
    assert status.returncode == 0 and json.loads(status.stdout)["healthy"] is True
    said = switched.stdout + switched.stderr + status.stdout + box.specd("history", "--json").stdout
    assert secret not in said
    assert secret not in _everything_specd_wrote(box) and secret not in box.unit_path.read_text()
    [key_file] = (Path(box.env["XDG_STATE_HOME"]) / "specd" / "secrets").iterdir()
    assert key_file.stat().st_mode & 0o777 == 0o600 and key_file.read_text().strip() == secret


def test_a_router_mode_profile_serves_the_models_of_its_directory(box: Box, tmp_path: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    (models / "tiny-router.gguf").symlink_to(MODEL)
    box.write_profile("router", f'binary = "{BINARY}"\nmodels_dir = "{models}"\nport = {box.port}\n'
                                "health_timeout_s = 60\nstability_s = 1\n")
    switched = box.specd("switch", "router")
    assert switched.returncode == 0, switched.stderr
    assert "--models-dir" in box.unit_path.read_text() and "--model " not in box.unit_path.read_text()
    listed = httpx.get(f"http://127.0.0.1:{box.port}/v1/models", timeout=10).json()["data"]
    assert any("tiny-router" in str(entry.get("id")) for entry in listed)


def test_a_launcher_runs_in_front_of_llama_server(box: Box) -> None:
    box.write_profile("niced", 'inherits = "base"\nlauncher = ["/usr/bin/nice", "-n", "5"]\n')
    switched = box.specd("switch", "niced")
    assert switched.returncode == 0, switched.stderr
    exec_start = next(line for line in box.unit_path.read_text().splitlines() if line.startswith("ExecStart="))
    assert exec_start.startswith('ExecStart="/usr/bin/nice" "-n" "5" "')
    pid = int(_show(box, "MainPID")["MainPID"])
    manager_nice = int(Path(f"/proc/{box.manager.process.pid}/stat").read_text().split()[18])
    server_nice = int(Path(f"/proc/{pid}/stat").read_text().split()[18])
    assert server_nice == min(manager_nice + 5, 19)  # nice -n 5 in front of what the manager runs at


def test_systemd_directives_of_a_profile_reach_the_unit(box: Box) -> None:
    box.write_profile("limits", 'inherits = "base"\n[systemd.Service]\nLimitNOFILE = "4096"\nRestart = "always"\n'
                                'ExecStartPre = ["/bin/true", "/bin/echo pre"]\n')
    switched = box.specd("switch", "limits")
    assert switched.returncode == 0, switched.stderr
    shown = _show(box, "LimitNOFILE", "Restart", "ExecStartPre")
    assert shown["LimitNOFILE"] == "4096" and shown["Restart"] == "always"
    assert "/bin/true" in shown["ExecStartPre"] and "/bin/echo" in shown["ExecStartPre"]
    assert box.unit_path.read_text().count("Restart=") == 1


def test_a_profile_cannot_carry_what_it_sets_itself(box: Box) -> None:
    box.write_profile("sneaky", 'inherits = "base"\n[systemd.Service]\nExecStart = "/bin/sh -c true"\n')
    refused = box.specd("switch", "sneaky")
    assert refused.returncode != 0
    assert "ExecStart" in refused.stderr and "sneaky.toml" in refused.stderr
    assert not box.unit_path.exists()


def test_llama_arg_variables_are_settings_checked_against_the_binary(box: Box) -> None:
    box.write_profile("typo", 'inherits = "base"\n[env]\nLLAMA_ARG_CTX_SIZ = "2048"\n')
    refused = box.specd("switch", "typo")
    assert refused.returncode != 0 and "did you mean LLAMA_ARG_CTX_SIZE" in refused.stderr
    assert not box.unit_path.exists()
    box.write_profile("both", 'inherits = "base"\n[env]\nLLAMA_ARG_CTX_SIZE = "2048"\n')
    switched = box.specd("switch", "both")
    assert switched.returncode == 0, switched.stderr
    assert "LLAMA_ARG_CTX_SIZE is overridden by" in switched.stdout + switched.stderr
