"""The first minutes of a new user: doctor on a box without the big models, quickstart end to end,
and backups pruned to backups_keep."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CACHE, REPO

pytestmark = [pytest.mark.systemd, pytest.mark.llama, pytest.mark.usefixtures("real_server")]


def test_doctor_says_what_is_missing_for_the_seed_box_profiles(box, tmp_path: Path) -> None:
    config = tmp_path / "qwen.toml"
    config.write_text(f'unit = "qwen.service"\nscope = "user"\nprofiles_dir = "{REPO / "profiles" / "qwen3.6-27b"}"\n')
    result = box.specd("doctor", "--json", "--config", str(config))
    assert result.returncode == 1
    findings = {f["check"]: f for f in json.loads(result.stdout)}
    assert findings["tiny llama-server build"]["ok"] and findings["systemd (user)"]["ok"]
    for name in ("autoregressive", "dflash", "mtp"):
        finding = findings[f"profile {name}"]
        assert not finding["ok"] and "no such binary" in finding["detail"] and finding["fix"]
    assert "profile base" not in findings


def test_doctor_is_happy_with_the_tiny_profiles(box) -> None:
    result = box.specd("doctor", "--json")
    findings = json.loads(result.stdout)
    assert all(f["ok"] for f in findings if f["check"].startswith("profile ")), findings


def test_backups_are_pruned_to_backups_keep(box) -> None:
    box.config_path.write_text(box.config_path.read_text() + "backups_keep = 2\n")
    for name in ("autoregressive", "ngram-simple", "ngram-mod", "autoregressive", "ngram-simple"):
        box.specd("switch", name, check=True)
    backups = sorted(box.unit_path.parent.glob(f"{box.unit}.pre-*"))
    assert len(backups) == 2 and backups[-1].name.endswith("-autoregressive")


def test_quickstart_end_to_end_on_a_private_systemd(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {key: value for key, value in os.environ.items()
           if key not in ("XDG_RUNTIME_DIR", "DBUS_SESSION_BUS_ADDRESS", "XDG_CONFIG_HOME", "XDG_STATE_HOME",
                          "XDG_CACHE_HOME", "SPECD_CONFIG")}
    env.update(HOME=str(home), SPECD_CACHE=str(CACHE))
    result = subprocess.run([sys.executable, "-m", "specd", "quickstart", "--stop-after"], env=env,
                            capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "starting a private one" in out
    assert "$ specd switch autoregressive" in out and "$ specd switch ngram-simple" in out
    assert "tok/s" in out and "back on autoregressive" in out
    assert (home / ".config" / "specd" / "specd.toml").exists()
