"""Shadow bench for real: the candidates run in the free slot beside the live server (private
systemd --user, the real llama-server and tiny model), which keeps answering its own clients."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from datetime import datetime
from typing import Self

import httpx
import pytest

from specd.setup.sandbox import free_port
from tests.conftest import Box

pytestmark = [pytest.mark.systemd, pytest.mark.llama, pytest.mark.usefixtures("real_server")]


class LiveClient:
    """A client of the live server: a completion, a pause, again (live traffic with idle gaps)."""

    def __init__(self, port: int, pause_s: float = 1.0) -> None:
        self.url = f"http://127.0.0.1:{port}/v1/completions"
        self.pause_s = pause_s
        self.sent = 0
        self.failed_at: list[tuple[float, str]] = []  # (time.time() when it failed, what it got)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        with httpx.Client(timeout=120) as client:
            while not self._stop.is_set():
                try:
                    answer = client.post(self.url, json={"model": "tiny", "prompt": "def add(a, b):",
                                                         "max_tokens": 16, "temperature": 0})
                    if answer.status_code != 200:
                        self.failed_at.append((time.time(), f"{answer.status_code} {answer.text[:200]}"))
                except httpx.HTTPError as exc:
                    self.failed_at.append((time.time(), f"{type(exc).__name__}: {exc}"))
                self.sent += 1
                self._stop.wait(self.pause_s)

    @property
    def failures(self) -> list[str]:
        return [what for _, what in self.failed_at]

    def failures_before(self, moment: float) -> list[str]:
        return [what for at, what in self.failed_at if at < moment]

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(180)


def main_pid(box: Box, unit: str) -> str:
    return subprocess.run(["systemctl", "--user", "show", "-p", "MainPID", "--value", unit], env=box.env,
                          capture_output=True, text=True, check=True).stdout.strip()


def test_a_shadow_bench_runs_beside_the_live_server_which_keeps_answering(box: Box) -> None:
    box.edit_profile("base", threads=1)
    box.config_path.write_text(box.config_path.read_text() + f'\n[proxy]\nlisten = "127.0.0.1:{free_port()}"\n'
                               f"spare_port = {free_port()}\n")
    box.specd("switch", "autoregressive", "--strategy", "restart", check=True)
    live_pid = main_pid(box, box.unit)
    live_text = box.unit_path.read_text()
    with LiveClient(box.port) as live:
        result = box.specd("bench", "--shadow", "autoregressive", "ngram-simple", "--workload", "repeat-input",
                           "--n", "3", "--max-tokens", "48", "--json", timeout=900)
    assert result.returncode == 0, result.stderr
    assert live.sent > 0 and live.failures == []
    report = json.loads(result.stdout)
    assert set(report["profiles"]) == {"autoregressive", "ngram-simple"}
    assert report["switches"] >= 2  # each candidate started in the free slot (rounds interleave A B | B A)
    assert any(note.startswith("ngram-simple:") and "samples clean" in note for note in report["notes"])
    # the live server never moved; the free slot is stopped and its unit gone again
    assert main_pid(box, box.unit) == live_pid and box.unit_path.read_text() == live_text
    assert main_pid(box, box.green_unit) == "0"
    assert not (box.manager.unit_dir / box.green_unit).exists()
    status = json.loads(box.specd("status", "--json", check=True).stdout)
    assert status["slot"] == "blue" and status["active_profile"] == "autoregressive"
    assert [g["profile"] for g in json.loads(box.specd("history", "--json", check=True).stdout)] == ["autoregressive"]


def test_a_shadow_bench_killed_with_its_candidate_running_is_undone_by_specd_recover(box: Box) -> None:
    box.edit_profile("base", threads=1)
    box.config_path.write_text(box.config_path.read_text() + f'\n[proxy]\nlisten = "127.0.0.1:{free_port()}"\n'
                               f"spare_port = {free_port()}\n")
    box.specd("switch", "autoregressive", "--strategy", "restart", check=True)
    live_pid, live_text = main_pid(box, box.unit), box.unit_path.read_text()
    killed = box.specd("bench", "--shadow", "ngram-simple", "--workload", "code", "--n", "1", "--max-tokens", "8",
                       env={"SPECD_FAULT": "gate"}, timeout=600)  # the candidate passed its gate, then kill -9
    assert killed.returncode == -9, killed.stderr
    assert main_pid(box, box.green_unit) != "0"  # the candidate still runs: nothing stopped it
    record = box.state.candidate_intent(box.unit)
    assert json.loads(record.read_text())["done"] == ["write", "reload", "start", "gate"]
    said = " ".join(box.specd("recover", check=True).stdout.split())  # rich wraps at 80 columns
    assert "shadow bench was interrupted" in said and box.green_unit in said
    assert main_pid(box, box.green_unit) == "0" and not (box.manager.unit_dir / box.green_unit).exists()
    assert not record.exists()
    assert main_pid(box, box.unit) == live_pid and box.unit_path.read_text() == live_text  # the live server: untouched
    assert json.loads(box.specd("status", "--json", check=True).stdout)["healthy"]


def test_a_shadow_bench_that_does_not_fit_is_refused_and_changes_nothing(box: Box) -> None:
    import os

    cores = len(os.sched_getaffinity(0))
    box.edit_profile("base", threads=cores)
    box.specd("switch", "autoregressive", "--strategy", "restart", check=True)
    live_pid = main_pid(box, box.unit)
    result = box.specd("bench", "--shadow", "ngram-simple", "--workload", "code", "--n", "2", "--max-tokens", "8")
    said = " ".join(result.stderr.split())
    assert result.returncode == 2 and "Traceback" not in said
    assert "ngram-simple does not fit beside the live server" in said
    assert f"{cores} + {cores} threads on {cores} cores" in said
    assert main_pid(box, box.unit) == live_pid and main_pid(box, box.green_unit) == "0"


def test_tune_shadow_benches_beside_the_live_server_then_switches_once_if_it_decides_to(box: Box) -> None:
    box.edit_profile("base", threads=1)
    box.config_path.write_text(box.config_path.read_text() + f'\n[proxy]\nlisten = "127.0.0.1:{free_port()}"\n')
    box.specd("switch", "autoregressive", "--strategy", "restart", check=True)
    live_pid = main_pid(box, box.unit)
    with LiveClient(box.port, pause_s=3.0) as live:
        result = box.specd("tune", "--shadow", "--no-verify", "-p", "ngram-simple", "--workload", "repeat-input",
                           "--n", "2", "--max-n", "8", "--max-tokens", "32", "--json", timeout=900)
    assert result.returncode == 0, result.stderr
    decision = json.loads(result.stdout)
    assert any("samples clean" in note for note in decision["notes"])
    history = json.loads(box.specd("history", "--json", check=True).stdout)
    if decision["switch"]:  # the winner is made live once, by a real switch, after the bench
        assert decision["final_profile"] == decision["best"] == history[0]["profile"]
        assert [g["trigger"] for g in history] == ["tuner", "cli"]
        # With no daemon (no proxy) that final switch restarts in place: the live client may meet the
        # new server loading then, never during the bench before it.
        assert live.failures_before(datetime.fromisoformat(history[0]["created_at"]).timestamp()) == []
    else:  # nothing switched: the live server never stopped
        assert live.failures == []
        assert decision["final_profile"] == "autoregressive" and len(history) == 1
        assert main_pid(box, box.unit) == live_pid
    assert main_pid(box, box.green_unit) == "0"  # no daemon here: the final switch restarted in place


@pytest.mark.timeout(1200)
def test_a_dry_run_benches_in_the_free_slot_and_leaves_the_server_and_the_history_alone(box: Box) -> None:
    """issue 37, item 9: `tune --dry-run` changed the live server and filled the history with bench switches."""
    box.edit_profile("base", threads=1)
    box.specd("switch", "autoregressive", "--strategy", "restart", check=True)
    live_pid = main_pid(box, box.unit)
    before = json.loads(box.specd("history", "--json", check=True).stdout)
    result = box.specd("tune", "--dry-run", "--no-verify", "-p", "ngram-simple", "--workload", "code", "--n", "2",
                       "--max-n", "2", "--max-tokens", "8", timeout=900)
    assert result.returncode == 0, result.stderr
    said = " ".join(result.stderr.split())
    assert said.startswith("dry run: benched in the free slot beside the live server"), said
    assert "tune: benching on the free slot; progress follows" in said  # piped: plain lines, from the start
    assert "autoregressive: switching in and warming up" in said and "requests measured" in said
    assert json.loads(box.specd("history", "--json", check=True).stdout) == before
    assert main_pid(box, box.unit) == live_pid and main_pid(box, box.green_unit) == "0"


@pytest.mark.timeout(1200)
def test_a_dry_run_that_must_switch_says_so_first_and_rollback_passes_over_its_steps(box: Box) -> None:
    import os

    cores = len(os.sched_getaffinity(0))
    box.edit_profile("base", threads=cores)  # two servers cannot share the cores: no free slot for the bench
    box.specd("switch", "ngram-simple", "--strategy", "restart", check=True)
    box.specd("switch", "autoregressive", "--strategy", "restart", check=True)
    result = box.specd("tune", "--dry-run", "--no-verify", "-p", "ngram-simple", "--workload", "code", "--n", "2",
                       "--max-n", "2", "--max-tokens", "8", timeout=900)
    assert result.returncode == 0, result.stderr
    said = " ".join(result.stderr.split())
    assert said.startswith("dry run: the free slot cannot hold the bench (") and "SWITCHES the live server" in said
    history = json.loads(box.specd("history", "--json", check=True).stdout)
    assert history[0]["profile"] == "autoregressive" and history[0]["trigger"] == "bench"  # put back by the bench
    assert all(g["trigger"] == "bench" for g in history[:-2])  # the owner's two switches are the oldest
    box.specd("rollback", check=True)
    assert json.loads(box.specd("status", "--json", check=True).stdout)["active_profile"] == "ngram-simple"
