"""The first minutes of a new user: doctor on a box without the big models, quickstart end to end,
and backups pruned to backups_keep."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specd.setup.sandbox import start_private_systemd
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
    profiles = {f["check"]: f for f in findings if f["check"].startswith("profile ")}
    assert sorted(profiles) == ["profile autoregressive", "profile draft", "profile ngram-mod",
                                "profile ngram-simple"], findings  # every tiny profile was checked
    assert all(f["ok"] for f in profiles.values()), findings
    # each says what the VRAM check found (here: no NVIDIA GPU, so it was skipped)
    assert all("; VRAM: no NVIDIA GPU" in f["detail"] for f in profiles.values()), findings


def test_backups_are_pruned_to_backups_keep(box) -> None:
    box.config_path.write_text(box.config_path.read_text() + "backups_keep = 2\n")
    for name in ("autoregressive", "ngram-simple", "ngram-mod", "autoregressive", "ngram-simple"):
        box.specd("switch", name, check=True)
    backups = sorted(box.unit_path.parent.glob(f"{box.unit}.pre-*"))
    assert len(backups) == 2 and backups[-1].name.endswith("-autoregressive")


# The tiny build cached on some hosts was compiled with -march=native including Intel AMX, whose
# kernels crash at the first decode where the host does not grant the tile state; LLAMA_ARG_REPACK=0
# keeps llama-server off them. The managers below hand this environment to the units they start.
NO_AMX = {"LLAMA_ARG_REPACK": "0"}
# What a sensible continuation of each demo prompt says; the tiny model's greedy wording differs from
# one CPU to another ("Paris, France." here, "the capital of the French Republic." on CI's host).
EXPECTED_ANSWERS = (("Paris", "France", "French"), ("100 degrees",), ("return a + b",))


def _fresh_env(home: Path, tmp: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if key not in ("XDG_RUNTIME_DIR", "DBUS_SESSION_BUS_ADDRESS", "XDG_CONFIG_HOME", "XDG_STATE_HOME",
                          "XDG_CACHE_HOME", "SPECD_CONFIG")}
    tmp.mkdir()
    env.update(HOME=str(home), SPECD_CACHE=str(CACHE), TMPDIR=str(tmp), **NO_AMX)
    return env


def _specd(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specd", *args], env=env, capture_output=True, text=True,
                          timeout=600, check=False)


def _assert_demo_answers(out: str) -> None:
    assert "is a base model" in out and "/v1/completions" in out
    for prompt in ("The capital of France is", "Water boils at a temperature of", "def add(a, b):"):
        assert f"prompt: {prompt}" in out
    answers = [line for line in out.splitlines() if line.startswith("  answer:")]
    assert len(answers) == 6, out  # three prompts on each of the two profiles
    for words in EXPECTED_ANSWERS:
        assert sum(any(word in line for word in words) for line in answers) == 2, (words, answers)


def _assert_next_commands_work(env: dict[str, str]) -> None:
    status = _specd(env, "status")
    assert status.returncode == 0 and "autoregressive" in status.stdout and "healthy" in status.stdout, status
    profiles = _specd(env, "profiles")
    assert profiles.returncode == 0 and "ngram-mod" in profiles.stdout, profiles
    history = _specd(env, "history")
    assert history.returncode == 0 and "rollback" in history.stdout, history
    switched = _specd(env, "switch", "ngram-mod")
    assert switched.returncode == 0 and "ngram-mod is healthy" in switched.stdout, switched
    doctor = _specd(env, "doctor", "--json")  # not suggested, but a new user runs it
    findings = json.loads(doctor.stdout)
    profiles_checked = [f for f in findings if f["check"].startswith("profile ")]
    assert profiles_checked and all("is held by" not in f["detail"] for f in profiles_checked), findings


def _exports(env_sh: Path) -> dict[str, str]:
    lines = [line.removeprefix("export ") for line in env_sh.read_text().splitlines()]
    return dict(line.split("=", 1) for line in lines)


def test_quickstart_without_a_user_manager_keeps_a_private_one_until_stop(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = _fresh_env(home, tmp_path / "tmp")
    result = _specd(env, "quickstart")
    env_sh = home / ".local" / "state" / "specd" / "quickstart-systemd" / "env.sh"
    try:
        assert result.returncode == 0, result.stdout + result.stderr
        out = result.stdout
        assert "starting a private one" in out and "specd quickstart --stop" in out and f"source {env_sh}" in out
        _assert_demo_answers(out)
        assert "back on autoregressive" in out
        assert (home / ".config" / "specd" / "specd.toml").exists()
        # A new shell that did not source env.sh: the error says where the manager is, changing nothing.
        unsourced = _specd(env, "switch", "ngram-mod")
        assert unsourced.returncode == 1 and f"source {env_sh}" in " ".join(unsourced.stderr.split()), unsourced
        _assert_next_commands_work({**env, **_exports(env_sh)})
    finally:
        stopped = _specd(env, "quickstart", "--stop")
    assert stopped.returncode == 0 and "stopped the private systemd" in stopped.stdout, stopped
    assert not env_sh.parent.exists() and not (home / ".config" / "specd" / "specd.toml").exists()
    assert list((tmp_path / "tmp").iterdir()) == []


def test_quickstart_with_a_user_manager_installs_the_demo_there(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    for key in ("XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(key, raising=False)
    for key, value in NO_AMX.items():
        monkeypatch.setenv(key, value)
    manager = start_private_systemd(tmp_path / "manager", home=home)  # stands in for the login session's
    try:
        env = _fresh_env(home, tmp_path / "tmp")
        env.update({key: manager.env[key] for key in ("XDG_RUNTIME_DIR", "DBUS_SESSION_BUS_ADDRESS")})
        result = _specd(env, "quickstart")
        assert result.returncode == 0, result.stdout + result.stderr
        out = result.stdout
        assert "using your systemd --user manager" in out and "private" not in out
        _assert_demo_answers(out)
        assert (home / ".config" / "systemd" / "user" / "llama-server-tiny.service").exists()
        _assert_next_commands_work(env)
    finally:
        manager.stop()
    assert list((tmp_path / "tmp").iterdir()) == []


def test_quickstart_stop_after_leaves_the_box_as_it_was(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = _fresh_env(home, tmp_path / "tmp")
    result = _specd(env, "quickstart", "--stop-after")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "starting a private one" in out and "back on autoregressive" in out
    assert "nothing is left running" in out
    assert not (home / ".config" / "specd" / "specd.toml").exists()
    assert (home / ".config" / "specd" / "quickstart.toml").exists()
    assert not (home / ".local" / "state" / "specd" / "quickstart-systemd").exists()
    assert list((tmp_path / "tmp").iterdir()) == []
