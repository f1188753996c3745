"""What install.sh, scripts/install-system-deps.sh and scripts/test.sh do on a box, told by what they
ask of apt, systemctl and pip.

The real scripts run in a copy of the repo's files under tmp_path; apt-get, dpkg, dpkg-query, sudo,
systemctl, loginctl and the venv's python are FAKE programs on the PATH (named so) that record how
they were called: installing packages or building a venv for real is not something a test may do
to the box it runs on. The fake apt-get prints what Debian's maintainer scripts print where systemd
is not PID 1 ("Failed to connect to bus"), as it did on the first-hour run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUNTIME = {"libgirepository1.0-dev", "libcairo2-dev", "pkg-config", "dbus", "dbus-user-session", "systemd",
           "build-essential", "cmake", "python3-venv", "python3-dev"}
TEST_ONLY = {"ccache", "git", "prometheus", "chromium", "chromium-driver", "nginx"}
BUS_NOISE = "Failed to connect to bus: No such file or directory"

FAKE = {
    "apt-get": f'echo "apt-get $*" >>"$FAKE_LOG"; echo "{BUS_NOISE}"; echo "{BUS_NOISE}" >&2',
    "dpkg-query": "exit 1",  # nothing is installed
    "dpkg": 'if [ "$1" = -L ] && [ "$2" = prometheus ]; then echo /lib/systemd/system/prometheus.service; fi',
    "sudo": '"$@"',
    "systemctl": 'echo "systemctl $*" >>"$FAKE_LOG"; [ "$*" != "--user is-system-running" ] || exit 1',
    "loginctl": "exit 1",
}


def fake_bin(tmp_path: Path) -> Path:
    directory = tmp_path / "fake-bin"
    directory.mkdir()
    for name, body in FAKE.items():
        (directory / name).write_text(f"#!/bin/bash\n# FAKE {name}\n{body}\n")
        (directory / name).chmod(0o755)
    return directory


def fake_python(path: Path) -> None:
    """A FAKE venv python: records each call (pip, mypy, ruff, pytest) and says so on stderr."""
    path.parent.mkdir(parents=True)
    path.write_text('#!/bin/bash\necho "python $*" >>"$FAKE_LOG"\necho "FAKE python $2" >&2\n')
    path.chmod(0o755)


def copy(names: list[str], into: Path) -> Path:
    for name in names:
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, target)
    return into


def run(script: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(script), *args], env=env, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    return {"PATH": f"{fake_bin(tmp_path)}:/usr/bin:/bin", "HOME": str(home), "FAKE_LOG": str(tmp_path / "calls"),
            "TMPDIR": str(tmp_path), "SPECD_SYSTEM_BIN": ""}


def calls(env: dict[str, str], program: str) -> list[list[str]]:
    lines = Path(env["FAKE_LOG"]).read_text().splitlines() if Path(env["FAKE_LOG"]).exists() else []
    return [line.split()[1:] for line in lines if line.split()[0] == program]


def packages_asked(env: dict[str, str]) -> set[str]:
    return {word for call in calls(env, "apt-get") if "install" in call for word in call if not word.startswith("-")
            and word not in ("install", "Dpkg::Use-Pty=0")}


def test_a_user_install_asks_apt_for_what_running_specd_needs_and_enables_nothing(tmp_path: Path,
                                                                                 env: dict[str, str]) -> None:
    repo = copy(["install.sh", "scripts/install-system-deps.sh", "units/specd.service", "README.md",
                 *(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md"))], tmp_path / "repo")
    fake_python(tmp_path / "specd-home" / "venv" / "bin" / "python")
    result = run(repo / "install.sh", env={**env, "SPECD_HOME": str(tmp_path / "specd-home")})
    assert result.returncode == 0, result.stdout + result.stderr
    assert packages_asked(env) == RUNTIME, calls(env, "apt-get")
    assert all("--no-install-recommends" in call for call in calls(env, "apt-get") if "install" in call)
    assert not [call for call in calls(env, "systemctl") if "enable" in call], calls(env, "systemctl")
    assert "Failed to connect to bus" not in result.stdout + result.stderr  # apt's chatter went to its log
    unit = (Path(env["HOME"]) / ".config" / "systemd" / "user" / "specd.service").read_text()
    documentation = next(line for line in unit.splitlines() if line.startswith("Documentation="))
    target = documentation.removeprefix("Documentation=file://").replace("%h", env["HOME"])
    assert Path(target).is_file(), documentation  # the README the unit points at is there
    assert "systemctl --user enable --now specd.service" in result.stdout  # told, not done


def test_the_test_installer_adds_the_test_tools_and_disables_the_services_they_bring(tmp_path: Path,
                                                                                    env: dict[str, str]) -> None:
    script = copy(["scripts/install-system-deps.sh"], tmp_path / "repo") / "scripts" / "install-system-deps.sh"
    result = run(script, "--test", env=env)
    assert result.returncode == 0, result.stderr
    asked = packages_asked(env)
    assert RUNTIME <= asked and {"prometheus", "chromium", "chromium-driver", "ccache"} <= asked
    assert "nginx" not in asked  # only benchmarks/proxy_overhead.py uses it: --bench
    disabled = [call for call in calls(env, "systemctl") if "disable" in call]
    assert disabled and all("prometheus.service" in call for call in disabled), calls(env, "systemctl")
    assert "not started at boot: prometheus.service" in result.stderr
    assert BUS_NOISE not in result.stdout + result.stderr


def test_the_readme_test_command_runs_two_workers_and_says_each_step_first(tmp_path: Path,
                                                                          env: dict[str, str]) -> None:
    """CI's entry point and the README's command are the same: scripts/test.sh, with pytest-xdist."""
    repo = copy(["scripts/test.sh", ".ci/run"], tmp_path / "repo")
    for name in ("install-system-deps.sh", "build-llama-server.sh", "get-test-model.sh"):
        (repo / "scripts" / name).write_text(f'#!/bin/bash\necho "FAKE {name}" >&2\necho /fake/path\n')
        (repo / "scripts" / name).chmod(0o755)
    fake_python(repo / ".venv" / "bin" / "python")
    result = run(repo / ".ci" / "run", env={**env, "PATH": f"{env['PATH']}:{os.environ['PATH']}"})
    assert result.returncode == 0, result.stderr
    pytest_call = next(call for call in calls(env, "python") if call[:2] == ["-m", "pytest"])
    assert " ".join(pytest_call).endswith("-n 2 --dist loadfile -q -ra --durations=15"), pytest_call
    lines = result.stderr.splitlines()
    assert lines[0].startswith("test.sh [0:0"), lines  # the first thing said, before anything runs
    for index, line in enumerate(lines):
        if line.startswith("FAKE"):  # every step is announced before it starts
            assert lines[index - 1].startswith("test.sh ["), lines
    chosen = run(repo / "scripts" / "test.sh", "-n", "0", "tests/unit", env={**env, "PATH": os.environ["PATH"]})
    assert chosen.returncode == 0 and calls(env, "python")[-1][-3:] == ["-n", "0", "tests/unit"]
    assert "--dist" not in calls(env, "python")[-1]
