"""`specd --help` and `specd status` start fast because they load only what they use: not numpy, the
tuner, the switch transaction, the daemon's web server or httpx's own command-line tool. Every
command took 1.4-2 s on the first-hour run; benchmarks/cli_startup.py measures the wall clock
(benchmarks/results/cli-startup.md). This test checks the cause, which does not depend on how
busy the box is: what the real command, run as a subprocess, has imported when it exits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

NOT_FOR_HELP_OR_STATUS = ("numpy", "starlette", "uvicorn", "apprise", "yaml", "tree_sitter", "gguf", "pygments",
                          "httpx._main", "specd.deploy.switch", "specd.deploy.preflight", "specd.deploy.capacity",
                          "specd.gpu.vram", "specd.tune.bench", "specd.tune.tuner", "specd.tune.workloads",
                          "specd.unit.importer", "specd.daemon.app", "specd.web")

PROBE = """
import atexit, json, runpy, sys
atexit.register(lambda: print(json.dumps(sorted(k for k, v in sys.modules.items() if v is not None)), file=sys.stderr))
sys.argv = ["specd", *sys.argv[1:]]
runpy.run_module("specd", run_name="__main__")
"""


def loaded_by(args: list[str], env: dict[str, str]) -> set[str]:
    result = subprocess.run([sys.executable, "-c", PROBE, *args], env=env, capture_output=True, text=True,
                            timeout=120, check=False, cwd="/")
    return set(json.loads(result.stderr.strip().splitlines()[-1]))


@pytest.mark.parametrize("args", [["--help"], ["status"], ["status", "--json"]], ids=" ".join)
def test_help_and_status_load_only_what_they_use(args: list[str], tmp_path: Path) -> None:
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    config = tmp_path / "specd.toml"
    config.write_text(f'unit = "llama-startup.service"\nscope = "user"\nprofiles_dir = "{profiles}"\n')
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "DBUS_", "SPECD_"))}
    env = {**keep, "HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "state"), "SPECD_CONFIG": str(config),
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    loaded = loaded_by(args, env)
    assert "specd.cli.core_cmds" in loaded  # the command ran
    heavy = sorted(name for name in NOT_FOR_HELP_OR_STATUS if name in loaded)
    assert heavy == [], f"specd {' '.join(args)} imported {heavy}"
