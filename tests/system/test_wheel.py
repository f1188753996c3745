"""A plain wheel works outside the checkout: it carries the unit template, the scripts and the
example profiles, so a pip/pipx install can render units (`specd show`) and run `specd doctor`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import CACHE, REPO

pytestmark = [pytest.mark.usefixtures("real_server")]


def test_a_plain_wheel_renders_units_and_runs_doctor_outside_the_checkout(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "dist"), str(REPO)],
                   check=True, timeout=300)
    [wheel] = list((tmp_path / "dist").glob("specd-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    for shipped in ("specd/units/llama-server.service.in", "specd/units/specd.service",
                    "specd/scripts/build-llama-server.sh", "specd/examples/tiny/base.toml",
                    "specd/web/static/index.html", "specd/web/static/app.js",
                    "specd/web/static/style.css"):  # the status page works offline: no CDN
        assert shipped in names, f"the wheel lacks {shipped}"
    # Installed alone (its dependencies come from this test's interpreter), run from elsewhere.
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
                   check=True, timeout=300)
    profiles = target / "specd" / "examples" / "tiny"
    config = tmp_path / "specd.toml"
    config.write_text(f'unit = "wheel-test.service"\nscope = "user"\nprofiles_dir = "{profiles}"\n'
                      '[daemon]\nhttp_listen = "127.0.0.1:8090"\n')
    env = {**os.environ, "PYTHONPATH": str(target), "SPECD_CACHE": str(CACHE), "SPECD_CONFIG": str(config),
           "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "config")}

    def specd(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "specd", *args], env=env, cwd=tmp_path, capture_output=True,
                              text=True, timeout=120, check=False)

    where = subprocess.run([sys.executable, "-c", "import specd; print(specd.__file__)"], env=env, cwd=tmp_path,
                           capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(target)), f"specd was imported from {where}, not the installed wheel"
    shown = specd("show", "autoregressive")
    assert shown.returncode == 0, shown.stderr
    assert "# specd-profile: autoregressive" in shown.stdout and "ExecStart=" in shown.stdout
    doctor = specd("doctor", "--json")
    findings = {f["check"]: f for f in json.loads(doctor.stdout)}
    assert findings["profile autoregressive"]["ok"], findings
    token = specd("web-token", "--url")
    assert token.returncode == 0 and token.stdout.startswith("http://127.0.0.1:8090/#token="), token.stderr
