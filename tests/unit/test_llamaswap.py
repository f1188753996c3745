"""llama-swap configs read the way llama-swap reads them (proxy/config/config.go)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specd.errors import UsageError
from specd.unit.llamaswap import read_llama_swap
from specd.unit.swap_import import profile_name

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "llama-swap"


def test_macros_expand_in_reverse_order_so_a_macro_may_use_earlier_ones() -> None:
    config = read_llama_swap("""
macros:
  bin: /opt/llama-server
  base: ${bin} --port ${PORT} -ngl 99
models:
  b-model:
    cmd: |
      ${base}
      # a comment line llama-swap drops
      --model /m/b.gguf \\
      --alias ${MODEL_ID}
  a-model:
    macros:
      bin: /opt/other/llama-server
    cmd: ${base} -m "/m/a b.gguf"
  remote:
    proxy: https://example.invalid/v1
""", "c.yaml", {})
    by_name = {m.name: m for m in config.models}
    assert by_name["a-model"].argv == ("/opt/other/llama-server", "--port", "5800", "-ngl", "99", "-m", "/m/a b.gguf")
    assert by_name["b-model"].argv == ("/opt/llama-server", "--port", "5801", "-ngl", "99", "--model", "/m/b.gguf",
                                       "--alias", "b-model")
    assert (by_name["a-model"].port, by_name["b-model"].port) == (5800, 5801)  # sorted model IDs
    assert by_name["remote"].argv == () and by_name["remote"].proxy == "https://example.invalid/v1"


def test_a_macro_defined_after_its_user_is_left_over_and_refused() -> None:
    config = read_llama_swap("macros:\n  early: x ${later}\n  later: y\nmodels:\n  m:\n"
                             "    cmd: llama-server --port ${PORT} ${early}\n", "c.yaml", {})
    assert re.search(r"cmd: unknown macro '\$\{later\}'", config.models[0].refused)


def test_env_macros_come_from_the_environment_and_an_unset_one_refuses_only_its_model() -> None:
    text = ("models:\n  m:\n    cmd: llama-server -m ${env.MODELS}/x.gguf --port 9000\n    proxy: http://127.0.0.1:9000\n"
            "  other:\n    cmd: llama-server -m /srv/y.gguf --port ${PORT}\n")
    assert read_llama_swap(text, "c.yaml", {"MODELS": "/srv"}).models[0].argv[2] == "/srv/x.gguf"
    unset = {m.name: m for m in read_llama_swap(text, "c.yaml", {}).models}
    assert "environment variable 'MODELS' is not set" in unset["m"].refused and unset["m"].argv == ()
    assert unset["other"].refused == "" and unset["other"].argv[2] == "/srv/y.gguf"


def test_yaml_errors_name_the_file_and_line() -> None:
    with pytest.raises(UsageError, match=r"c.yaml line 3: not valid YAML"):
        read_llama_swap("models:\n  m:\n    cmd: x: y\n", "c.yaml", {})


def test_real_configs_expand_as_llama_swap_would() -> None:
    tmielsch = read_llama_swap((CORPUS / "tmielsch--turboquant-setup--llama-swap__config.yaml").read_text(), "t", {})
    first = tmielsch.models[0]
    assert first.name == "deepseek-v4-flash-128k" and first.argv[:7] == (
        "/app/llama-server", "--host", "127.0.0.1", "--port", "5800", "--alias", "deepseek-v4-flash-128k")
    assert not any("${" in word for model in tmielsch.models for word in model.argv)
    wvdschel = read_llama_swap((CORPUS / "wvdschel--llama-swap-amdvlk--llama-swap.yaml").read_text(), "w", {})
    assert len(wvdschel.models) == 18 and wvdschel.models[0].argv[:2] == ("nice", "/app/llama-server")
    assert any("groups" in note for note in wvdschel.not_carried)
    assert any("filters" in note for m in wvdschel.models for note in m.not_carried)


def test_profile_names_from_model_ids() -> None:
    assert profile_name("qwen2.5-coder_7b") == "qwen2.5-coder_7b"
    assert profile_name("org/model:Q4 K") == "org-model-Q4-K"


def test_a_model_set_by_llama_arg_env_becomes_the_profiles_model_and_stays_a_variable(tmp_path: Path) -> None:
    from specd.profiles.load import load_profile
    from specd.unit.swap_import import import_llama_swap

    config = tmp_path / "config.yaml"
    config.write_text("models:\n  coder:\n    aliases: [qwen-coder]\n    env:\n      - LLAMA_ARG_MODEL=/m/coder.gguf\n"
                      "      - LLAMA_ARG_CTX_SIZE=30000\n    cmd: /opt/llama-server --port ${PORT}\n    ttl: 600\n")
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    [outcome], _ = import_llama_swap(config, profiles, environ={})
    assert outcome.profile is not None, outcome.reason
    profile = load_profile(profiles, "coder")
    assert profile.model == Path("/m/coder.gguf") and profile.port == 5800
    assert profile.alias == "coder,qwen-coder"  # what clients asked llama-swap for
    assert dict(profile.env)["LLAMA_ARG_MODEL"] == "/m/coder.gguf"
    assert outcome.result is not None and any("ttl" in row.became for row in outcome.result.rows)


def _swap_import(tmp_path: Path, text: str) -> dict[str, object]:
    from specd.unit.swap_import import import_llama_swap

    config = tmp_path / "config.yaml"
    config.write_text(text)
    profiles = tmp_path / "profiles"
    profiles.mkdir(exist_ok=True)
    outcomes, _ = import_llama_swap(config, profiles, environ={})
    return {o.model: (o.result if o.profile else o.reason) for o in outcomes}


def test_cmd_goes_through_the_same_reader_as_units(tmp_path: Path) -> None:
    """Issue 34: a bare -fa does not swallow the next flag, a repeated flag keeps the last value (said),
    two model sources are refused naming the cmd, a fork named beellama-server is not refused by its
    name, and one model's unset ${env.X} refuses that model only."""
    outcomes = _swap_import(tmp_path, """
models:
  bare-fa:
    cmd: /app/llama-server --port ${PORT} -m /m/a.gguf -fa --n-gpu-layers 99 --jinja
  twice:
    cmd: /app/llama-server --port ${PORT} -m /m/b.gguf -ngl 99 -c 4096 -ngl 80
  both:
    cmd: /app/llama-server --port ${PORT} --model /m/c.gguf --models-dir /m
  bee:
    cmd: /opt/beellama/beellama-server --port ${PORT} -m /m/d.gguf --spec-type dflash -md /m/d-drafter.gguf
  secret:
    cmd: /app/llama-server --port ${PORT} -m ${env.MODELS}/e.gguf
""")
    bare, twice, both, bee, secret = (outcomes[m] for m in ("bare-fa", "twice", "both", "bee", "secret"))
    assert not isinstance(bare, str) and bare is not None
    assert bare.data["args"] == ["-fa"] and bare.data["n_gpu_layers"] == 99 and bare.data["jinja"] is True
    assert not isinstance(twice, str) and twice is not None and twice.data["n_gpu_layers"] == 80
    assert any("llama-server takes the last value, not 99" in row.became for row in twice.rows)
    assert isinstance(both, str) and "two model sources (--model /m/c.gguf and --models-dir /m)" in both
    assert "(cmd: /app/llama-server --port 5802 --model /m/c.gguf --models-dir /m)" in both
    assert not isinstance(bee, str) and bee is not None and not bee.checked
    assert bee.data["speculative"]["type"] == "dflash"
    assert isinstance(secret, str) and "environment variable 'MODELS' is not set" in secret
