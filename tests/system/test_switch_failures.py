"""Every way a new profile can fail the health gate reverts to the previous, healthy profile.

The failing servers are FAKE (tests/fakes/fake_llama_server.py): a real llama-server cannot be
made to exit at start, never turn healthy, or die 3 s after turning healthy on demand.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx
import pytest

from specd.unit.render import profile_of_unit

pytestmark = [pytest.mark.systemd, pytest.mark.llama, pytest.mark.usefixtures("real_server")]
FAKE = Path(__file__).parents[1] / "fakes" / "fake_llama_server.py"


def fake_binary(directory: Path) -> Path:
    binary = directory / "fake-llama-server"
    binary.write_text(f"#!{sys.executable}\nimport runpy, sys\nrunpy.run_path({str(FAKE)!r}, run_name='__main__')\n")
    binary.chmod(0o755)
    return binary


def add_fake_profile(box, name: str, mode: str, *, timeout: int = 8) -> None:
    binary = fake_binary(box.root)
    box.write_profile(name, f'''
inherits = "base"
binary = "{binary}"
health_timeout_s = {timeout}
stability_s = 5
args = ["--fake-mode", "{mode}", "--fake-seconds", "2"]
''')


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("exit-at-start", "exited while loading"),
        ("never-healthy", "not healthy after"),
        ("wrong-alias", "does not list alias 'tiny'"),
        ("die-after-healthy", "did not stay up"),
    ],
)
def test_failing_profile_reverts_to_previous(box, mode: str, reason: str) -> None:
    box.specd("switch", "autoregressive", check=True)
    before = box.unit_path.read_text()
    add_fake_profile(box, f"broken-{mode}", mode)

    result = box.specd("switch", f"broken-{mode}")

    assert result.returncode == 1, result.stdout + result.stderr
    assert reason in result.stderr
    assert "reverted to autoregressive, which is healthy again" in result.stderr
    assert "Traceback" not in result.stderr
    assert box.unit_path.read_text() == before
    answer = httpx.get(f"http://127.0.0.1:{box.port}/v1/models", timeout=10).json()
    assert answer["data"][0]["id"] == "tiny"
    history = json.loads(box.specd("history", "--json", check=True).stdout)
    assert history[0]["outcome"] == "reverted" and history[0]["profile"] == f"broken-{mode}"
    status = json.loads(box.specd("status", "--json", check=True).stdout)
    assert status["active_profile"] == "autoregressive" and status["healthy"]


def test_failing_first_switch_removes_the_new_unit(box) -> None:
    add_fake_profile(box, "broken", "exit-at-start")
    result = box.specd("switch", "broken")
    assert result.returncode == 1
    assert "was removed again" in result.stderr
    assert not box.unit_path.exists()


def test_rollback_after_failed_switch_still_walks_good_generations(box) -> None:
    box.specd("switch", "autoregressive", check=True)
    box.specd("switch", "ngram-simple", check=True)
    add_fake_profile(box, "broken", "never-healthy")
    assert box.specd("switch", "broken").returncode == 1
    box.specd("rollback", check=True)
    assert profile_of_unit(box.unit_path.read_text()) == "autoregressive"


def test_without_journald_the_revert_shows_why_the_real_server_failed_to_start(box) -> None:
    """A truncated GGUF passes preflight (its header is whole) and the real llama-server fails to load
    it. Where no systemd-journald runs (this rig; containers) the server's output used to be lost and
    the message said only "run its ExecStart= by hand"; now it is appended to a file in the state
    directory and the message ends with llama-server's own last lines."""
    from specd.deploy.systemd import journald_runs
    from tests.system.test_notify import truncated_model

    box.specd("switch", "autoregressive", check=True)
    box.write_profile("broken-model", f'inherits = "autoregressive"\nmodel = "{truncated_model(box)}"\n'
                                      "health_timeout_s = 30\n")
    result = box.specd("switch", "broken-model")
    assert result.returncode == 1 and "reverted to autoregressive" in result.stderr, result.stderr
    journal = result.stderr.split("journal ---", 1)[1]
    assert "failed to load model" in journal, result.stderr  # llama-server's own words
    if not journald_runs():
        assert f"from {box.state.server_output(box.unit)}" in journal, result.stderr
