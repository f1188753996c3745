"""specd-emulator: the performance model's calibration against the seeds, and the real process over HTTP."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from specd.emulator.model import (
    decode_rate,
    expected_wall_ms,
    interpolate,
    load_model,
    mode_for_spec_types,
    plan_request,
)
from specd.emulator.options import OPTIONS, help_text
from specd.emulator.server import parse_args
from specd.errors import PreflightError, UsageError
from specd.profiles.flags import parse_help
from specd.traffic.taskclass import asks_to_repeat

REPO = Path(__file__).resolve().parents[2]
SEEDS = load_model()
CODE_ASK = [{"role": "user", "content": "Write a Python function that merges two sorted lists."}]

FAST_CONFIG = """
[emulator]
name = "test"
noise_sigma = 0.0
default_max_tokens = 32

[mode.none]
load_time_s = 100.0
prefill_points = [[1, 1000.0]]
decode_points = [[1, 100.0]]
batch_penalty = 0.0

[mode.mtp]
load_time_s = 100.0
prefill_points = [[1, 800.0]]
decode_points = [[1, 200.0]]
acceptance = { code = 0.8, factual = 0.6, analysis = 0.5, creative = 0.4 }
batch_penalty = 1.0
"""


def wall_s(mode: str, prompt: int, out: int, task_class: Any = "code") -> float:
    return expected_wall_ms(SEEDS.mode(mode), prompt, out, task_class) / 1000.0


# --- the performance model, calibrated to the seed articles ---------------------------------------


def test_plain_beats_mtp_below_the_crossover_and_loses_above() -> None:
    for out in (100, 500, 800):
        assert wall_s("none", 43000, out) < wall_s("mtp", 43000, out)
    for out in (1100, 2000):
        assert wall_s("mtp", 43000, out) < wall_s("none", 43000, out)
    crossover = next(o for o in range(100, 3000, 10) if wall_s("mtp", 43000, o) < wall_s("none", 43000, o))
    assert 850 <= crossover <= 1050


def test_seed_002_wall_clock_within_ten_percent() -> None:
    measured = {("none", 100): 41.9, ("none", 2000): 107.5, ("dflash", 2000): 112.6, ("mtp", 2000): 91.4}
    for (mode, out), seconds in measured.items():
        assert wall_s(mode, 43000, out) == pytest.approx(seconds, rel=0.1)


def test_dflash_collapses_at_long_outputs() -> None:
    dflash = SEEDS.mode("dflash")
    assert decode_rate(dflash, 100, "code") > 1.5 * decode_rate(dflash, 2000, "code")
    assert wall_s("dflash", 43000, 2000) > wall_s("none", 43000, 2000)
    assert wall_s("dflash", 500, 2000, "factual") > wall_s("none", 500, 2000, "factual")


def test_mtp_wins_on_code_and_loses_on_creative() -> None:
    assert wall_s("mtp", 500, 256, "code") < 0.8 * wall_s("none", 500, 256, "code")
    assert wall_s("mtp", 500, 256, "creative") > wall_s("none", 500, 256, "creative")


def test_batching_hurts_speculation_more_than_plain() -> None:
    plain, dflash = SEEDS.mode("none"), SEEDS.mode("dflash")
    single = decode_rate(dflash, 256, "code", 1) / decode_rate(plain, 256, "code", 1)
    batched = decode_rate(dflash, 256, "code", 8) / decode_rate(plain, 256, "code", 8)
    assert single > 1.3 and batched < 0.8
    assert decode_rate(plain, 256, "code", 8) > 0.85 * decode_rate(plain, 256, "code", 1)


def test_ngram_wins_only_when_the_answer_repeats_the_prompt() -> None:
    ngram, plain = SEEDS.mode("ngram"), SEEDS.mode("none")
    assert decode_rate(ngram, 500, "code", repeats_input=True) > 1.5 * decode_rate(plain, 500, "code")
    assert decode_rate(ngram, 500, "code") < decode_rate(plain, 500, "code")
    body = "def f(x):\n    return x\n" * 30
    assert asks_to_repeat("Rewrite this code with type hints:\n" + body)
    assert not asks_to_repeat("Rewrite it.")
    assert not asks_to_repeat("Explain this code:\n" + body)


def test_prompt_cache_and_draft_counts() -> None:
    mtp, plain = SEEDS.mode("mtp"), SEEDS.mode("none")
    cold = plan_request(mtp, prompt_tokens=43241, cache_n=0, output_tokens=100, task_class="code")
    warm = plan_request(mtp, prompt_tokens=43241, cache_n=43237, output_tokens=100, task_class="code")
    assert warm.prompt_n == 4 and warm.cache_n == 43237
    assert warm.prompt_ms < cold.prompt_ms / 50
    full = plan_request(mtp, prompt_tokens=10, cache_n=10, output_tokens=5, task_class="code")
    assert full.prompt_n == 1, "llama-server always evaluates at least one prompt token"
    assert cold.draft_n is not None and cold.draft_n_accepted is not None
    assert cold.draft_n_accepted / cold.draft_n == pytest.approx(0.84, abs=0.03)
    creative = plan_request(mtp, prompt_tokens=10, cache_n=0, output_tokens=100, task_class="creative")
    assert creative.draft_n_accepted is not None and creative.draft_n_accepted < cold.draft_n_accepted
    assert plan_request(plain, prompt_tokens=10, cache_n=0, output_tokens=100, task_class="code").draft_n is None


def test_interpolate() -> None:
    points = ((100.0, 10.0), (200.0, 20.0))
    assert interpolate(points, 50) == 10.0
    assert interpolate(points, 150) == 15.0
    assert interpolate(points, 900) == 20.0


def test_spec_type_selects_mode() -> None:
    assert mode_for_spec_types(["draft-mtp"], False) == "mtp"
    assert mode_for_spec_types(["none", "draft-dflash"], False) == "dflash"
    assert mode_for_spec_types(["ngram-mod"], False) == "ngram"
    assert mode_for_spec_types(["none"], True) == "draft"
    assert mode_for_spec_types([], False) == "none"
    with pytest.raises(UsageError, match="draft-bogus"):
        mode_for_spec_types(["draft-bogus"], False)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[mode.none]\nload_time_s = 1\nprefill_points = [[1, 1]]\ndecode_points = [[1, 1]]\nspeed = 2\n",
         "mode.none: unknown key 'speed'"),
        ("[mode.none]\nload_time_s = 1\nprefill_points = [[2, 1], [1, 1]]\ndecode_points = [[1, 1]]\n",
         "must increase"),
        ("[mode.mtp]\nload_time_s = 1\nprefill_points = [[1, 1]]\ndecode_points = [[1, 1]]\n", "mode.none"),
        ("[mode.none\n", "not valid TOML"),
    ],
)
def test_bad_config_names_file_and_key(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(UsageError) as caught:
        load_model(path)
    assert str(path) in caught.value.message and problem in caught.value.message


# --- command line ---------------------------------------------------------------------------------


def test_parse_args_like_llama_server() -> None:
    options = parse_args(["-m", "/m.gguf", "--alias", "a,b", "-np", "2", "-c", "8192", "--spec-type", "draft-mtp",
                          "--spec-draft-n-max", "6", "-fa", "on", "--jinja", "--metrics", "-ngl", "99",
                          "--emulator-time-scale", "0.5"])
    assert options.aliases == ("a", "b") and options.parallel == 2 and options.ctx_size == 8192
    assert options.mode == "mtp" and options.draft_n_max == 6 and options.metrics and options.time_scale == 0.5
    assert parse_args(["-m", "/m.gguf"]).aliases == ("/m.gguf",)
    assert parse_args(["-md", "/d.gguf"]).mode == "draft"
    for argv, message in ((["--bogus"], "invalid argument: --bogus"), (["--port"], "expected value"),
                          (["--port", "x"], "--port"), (["--emulator-time-scale", "-1"], "time-scale")):
        with pytest.raises(UsageError, match=message):
            parse_args(argv)


def test_help_uses_llama_server_layout() -> None:
    text = help_text()
    option_lines = [line for line in text.splitlines() if line.startswith("-") and not line.startswith("-----")]
    assert len(option_lines) == len(OPTIONS)
    for line in text.splitlines():
        if line.startswith("-") and not line.startswith("-----") and len(line) > 40 and line[39] == " ":
            assert line[40] != " ", line
    model_line = next(line for line in text.splitlines() if line.startswith("-m,    --model FNAME "))
    assert model_line.index("model path") == 40
    assert "--spec-type none,draft-simple,draft-eagle3,draft-mtp,draft-dflash" in text
    assert "emulator" in text.splitlines()[0]


def test_help_parses_like_the_real_binary() -> None:
    parsed = parse_help("specd-emulator", help_text())
    assert parsed.has("-md") and parsed.has("--spec-draft-n-max") and parsed.has("--emulator-time-scale")
    assert parsed.spec_type_spelling("mtp", profile_name="t") == "draft-mtp"
    assert parsed.spec_type_spelling("draft-dflash,ngram-mod", profile_name="t") == "draft-dflash,ngram-mod"
    assert parsed.spec_type_spelling("mtp:n_max=2,p_min=0.6", profile_name="t") == "draft-mtp:n_max=2,p_min=0.6"
    with pytest.raises(PreflightError, match="did you mean 'mtp'"):
        parsed.spec_type_spelling("mpt", profile_name="t")
    assert parsed.takes_value("--ctx-size") is True and parsed.takes_value("--jinja") is False


# --- the real process -----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def emulator_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "specd.emulator.server", *args]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(emulator_cmd(*args), capture_output=True, text=True, timeout=60, cwd=REPO, env=env,
                          check=False)


class Server:
    def __init__(self, tmp_path: Path, *args: str) -> None:
        config = tmp_path / "fast.toml"
        config.write_text(FAST_CONFIG)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = (tmp_path / f"emulator-{self.port}.log").open("w+")
        argv = emulator_cmd("-m", "/models/test.gguf", "--port", str(self.port), "--emulator-config", str(config),
                            "--emulator-time-scale", "0.02", *args)
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        self.client = httpx.Client(base_url=self.url, timeout=30)
        self.health: list[int] = []

    def wait_healthy(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.output()
            try:
                self.health.append(self.client.get("/health").status_code)
                if self.health[-1] == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"emulator never turned healthy:\n{self.output()}")

    def output(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self) -> None:
        self.client.close()
        self.proc.terminate()
        self.proc.wait(timeout=10)
        self.log.close()

    def chat(self, content: str = CODE_ASK[0]["content"], **body: Any) -> dict[str, Any]:
        response = self.client.post("/v1/chat/completions",
                                    json={"messages": [{"role": "user", "content": content}], **body})
        assert response.status_code == 200, response.text
        return dict(response.json())


@pytest.fixture(scope="module")
def mtp_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One MTP-mode emulator for the module (each start models a 2 s load); tests use distinct prompts."""
    server = Server(tmp_path_factory.mktemp("mtp"), "--alias", "qwen,backup", "-np", "2", "--spec-type", "draft-mtp",
                    "--metrics")
    try:
        server.wait_healthy()
        yield server
    finally:
        server.stop()


def test_health_turns_from_loading_to_ok(mtp_server: Server) -> None:
    assert mtp_server.health[0] == 503 and mtp_server.health[-1] == 200
    assert "performance emulator" in mtp_server.output()


def test_health_body_while_loading(tmp_path: Path) -> None:
    server = Server(tmp_path, "--emulator-time-scale", "10")
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                response = server.client.get("/health")
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline and server.proc.poll() is None, server.output()
                time.sleep(0.05)
        assert response.status_code == 503
        assert response.json()["error"]["message"] == "Loading model"
        assert server.client.post("/v1/chat/completions", json={"messages": CODE_ASK}).status_code == 503
    finally:
        server.stop()


def test_models_and_props(mtp_server: Server) -> None:
    models = mtp_server.client.get("/v1/models").json()
    assert models["data"][0]["id"] == "qwen" and models["data"][0]["aliases"] == ["qwen", "backup"]
    props = mtp_server.client.get("/props").json()
    assert props["emulator"] is True and props["model_alias"] == "qwen" and props["total_slots"] == 2
    assert props["speculative_mode"] == "mtp"


def test_non_streaming_timings_are_unscaled(mtp_server: Server) -> None:
    reply = mtp_server.chat(max_tokens=40)
    timings, usage = reply["timings"], reply["usage"]
    assert usage["completion_tokens"] == 40 == timings["predicted_n"]
    assert timings["predicted_per_second"] == pytest.approx(200.0, rel=1e-3), "unscaled model rate"
    assert timings["prompt_n"] == usage["prompt_tokens"] and timings["cache_n"] == 0
    assert {"draft_n", "draft_n_accepted", "prompt_ms", "prompt_per_second", "predicted_ms"} <= set(timings)
    assert timings["draft_n_accepted"] / timings["draft_n"] == pytest.approx(0.8, abs=0.05)
    assert reply["choices"][0]["finish_reason"] == "length"


def test_streaming_chunks(mtp_server: Server) -> None:
    with mtp_server.client.stream("POST", "/v1/chat/completions",
                                  json={"messages": CODE_ASK, "max_tokens": 12, "stream": True}) as response:
        assert response.status_code == 200
        events = [line[len("data: "):] for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    pieces = [c["choices"][0]["delta"].get("content") for c in chunks]
    assert len([p for p in pieces if p]) == 12
    final = chunks[-1]
    assert final["choices"][0]["finish_reason"] == "length"
    assert final["usage"]["completion_tokens"] == 12 and final["timings"]["predicted_n"] == 12


def test_text_completions_answer_in_the_text_completion_shape(mtp_server: Server) -> None:
    """/v1/completions (the routing probe's request): a prompt string in, `text` out, the same timings."""
    reply = mtp_server.client.post("/v1/completions", json={"prompt": "def merge(a, b):", "max_tokens": 9})
    assert reply.status_code == 200, reply.text
    answer = reply.json()
    assert answer["object"] == "text_completion" and answer["id"].startswith("cmpl-")
    assert isinstance(answer["choices"][0]["text"], str) and "message" not in answer["choices"][0]
    assert answer["usage"]["completion_tokens"] == 9 == answer["timings"]["predicted_n"]
    assert answer["timings"]["draft_n"] > 0  # MTP drafts on a text completion too
    with mtp_server.client.stream("POST", "/completions",
                                  json={"prompt": "def split(a):", "max_tokens": 5, "stream": True}) as response:
        events = [line[len("data: "):] for line in response.iter_lines() if line.startswith("data: ")]
    chunks = [json.loads(e) for e in events[:-1]]
    assert events[-1] == "[DONE]" and {c["object"] for c in chunks} == {"text_completion"}
    assert len([c for c in chunks if c["choices"][0]["text"]]) == 5 and chunks[-1]["timings"]["predicted_n"] == 5
    for bad in ({"prompt": ""}, {"prompt": 3}, {"messages": CODE_ASK}):
        refused = mtp_server.client.post("/v1/completions", json=bad)
        assert refused.status_code == 400 and "'prompt'" in refused.json()["error"]["message"], bad


def test_prompt_cache_reuse(mtp_server: Server) -> None:
    ask = "Write a Go function that reverses a slice in place."
    first = mtp_server.chat(ask, max_tokens=4)["timings"]
    second = mtp_server.chat(ask, max_tokens=4)["timings"]
    assert first["prompt_n"] > 10, "only the shared template prefix can come from the cache"
    assert second["cache_n"] >= first["cache_n"] + first["prompt_n"] - 2 and second["prompt_n"] <= 2
    uncached = mtp_server.chat(ask, max_tokens=4, cache_prompt=False)["timings"]
    assert uncached["cache_n"] == 0 and uncached["prompt_n"] == first["cache_n"] + first["prompt_n"]


def test_concurrency_slows_speculation(mtp_server: Server) -> None:
    solo = mtp_server.chat("Write a Java class", max_tokens=200)["timings"]["predicted_per_second"]
    rates: list[float] = []
    together = threading.Barrier(2)

    def one() -> None:
        with httpx.Client(base_url=mtp_server.url, timeout=30) as client:
            body = {"messages": [{"role": "user", "content": "Write a Rust function"}], "max_tokens": 2000}
            client.get("/health")
            together.wait(timeout=30)
            rates.append(client.post("/v1/chat/completions", json=body).json()["timings"]["predicted_per_second"])

    threads = [threading.Thread(target=one) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert solo == pytest.approx(200.0, rel=1e-3)
    # Two in flight halve the rate at batch_penalty 1 while they overlap; on a loaded box the second
    # request may join a few hundred ms into the first's ~20 s decode, which the first ran alone.
    assert 100.0 * (1 - 1e-3) <= min(rates) <= 110.0, "two in flight halve the rate at batch_penalty 1"


def test_metrics_counters(mtp_server: Server) -> None:
    def predicted() -> int:
        text = mtp_server.client.get("/metrics").text
        match = re.search(r"^llamacpp:tokens_predicted_total (\d+)$", text, re.MULTILINE)
        assert match, text
        return int(match.group(1))

    before = predicted()
    mtp_server.chat("Write a C function that counts bits.", max_tokens=10)
    assert predicted() == before + 10
    text = mtp_server.client.get("/metrics").text
    assert re.search(r"^llamacpp:spec_decode_num_draft_tokens_total [1-9]", text, re.MULTILINE)
    assert "# TYPE llamacpp:prompt_tokens_total counter" in text


def test_plain_mode_has_no_draft_fields_and_no_metrics(tmp_path: Path) -> None:
    server = Server(tmp_path)
    try:
        server.wait_healthy()
        timings = server.chat()["timings"]
        assert timings["predicted_n"] == 32, "config default_max_tokens"
        assert "draft_n" not in timings and "draft_n_accepted" not in timings
        assert server.client.get("/metrics").status_code == 501
        bad = server.client.post("/v1/chat/completions", json={"messages": []})
        assert bad.status_code == 400
    finally:
        server.stop()


def test_unknown_flag_exits_1() -> None:
    result = run_cli("-m", "x.gguf", "--bogus-flag")
    assert result.returncode == 1
    assert "error: invalid argument: --bogus-flag" in result.stderr


def test_missing_mode_in_config_exits_1(tmp_path: Path) -> None:
    config = tmp_path / "plain.toml"
    config.write_text(FAST_CONFIG.split("[mode.mtp]")[0])
    result = run_cli("--emulator-config", str(config), "--spec-type", "draft-dflash")
    assert result.returncode == 1 and "[mode.dflash]" in result.stderr


def test_help_and_version_processes() -> None:
    helped = run_cli("--help")
    assert helped.returncode == 0 and "-np,   --parallel N" in helped.stdout
    version = run_cli("--version")
    assert version.returncode == 0 and "version: 0 (emulator)" in version.stderr
