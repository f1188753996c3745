"""specd.unit.llamaswap: llama-swap configs read the way llama-swap reads them.

The corpus files are verbatim configs from public repositories; every expected value below was
read off those files by hand (macro expansion, sorted-ID port order, notes).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specd.errors import UsageError
from specd.unit.llamaswap import SwapConfig, SwapModel, read_llama_swap, split_posix

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "llama-swap"
CAMERONR = "cameronr--dotfiles--llama-swap__config.yaml"
TMIELSCH = "tmielsch--turboquant-setup--llama-swap__config.yaml"
WVDSCHEL = "wvdschel--llama-swap-amdvlk--llama-swap.yaml"
ACERSPYRO = "acerspyro--beellama-swapnheal-stack--llama-swap__llama-swap.yaml"
MYKOLA = "MykolaBilyi--local-llm-service--llama-swap.yaml"
KEY_ENV = {"OPENROUTER_API_KEY": "sk-test"}


def corpus(name: str, environ: dict[str, str] | None = None) -> SwapConfig:
    return read_llama_swap((CORPUS / name).read_text(), name, KEY_ENV if environ is None else environ)


def model(config: SwapConfig, name: str) -> SwapModel:
    return next(m for m in config.models if m.name == name)


def inline(text: str, environ: dict[str, str] | None = None) -> SwapConfig:
    return read_llama_swap(text, "inline.yaml", environ or {})


def with_key(notes: tuple[str, ...], key: str) -> str:
    return next(n for n in notes if n.startswith(f"not carried: {key}="))


# --- the real configs ---------------------------------------------------------------------------

def test_tmielsch_engine_model_id_and_port_are_expanded_in_sorted_id_order() -> None:
    config = corpus(TMIELSCH)
    assert len(config.models) == 15
    first = model(config, "deepseek-v4-flash-128k")
    assert first.argv == (
        "/app/llama-server", "--host", "127.0.0.1", "--port", "5800",
        "--alias", "deepseek-v4-flash-128k",
        "-m", "/models/DeepSeek-V4-Flash-ConfigI-GGUF/DeepSeek-V4-Flash-0731-ConfigI-00001-of-00003.gguf",
        "-fit", "on", "-fitt", "512", "-c", "131072", "-ctk", "f16", "-ctv", "f16",
        "--flash-attn", "on", "--jinja", "-np", "1", "--moe-cache", "on", "-cmoe",
        "--dry-multiplier", "0.8", "--dry-base", "1.75",
    )
    assert first.port == 5800 and first.proxy == "http://localhost:5800"
    # the file lists qwen3.8-27b-64k last; sorted, it is also last: the 15th port
    last = model(config, "qwen3.8-27b-64k")
    assert last.port == 5814 and "--port" in last.argv and last.argv[last.argv.index("--port") + 1] == "5814"
    assert model(config, "deepseek-v4-flash-64k").port == 5805  # 6th in sorted order, 6th in the file
    assert first.description == (
        "DeepSeek V4 Flash - 128K - Config-I, FP16 KV, CPU-MoE + moe-cache on. MLA latent KV cache, 128K context."
    )
    assert with_key(first.not_carried, "capabilities").startswith("not carried: capabilities={in, out, tools, context}")
    assert with_key(config.not_carried, "globalTTL") == "not carried: globalTTL=0 (specd keeps one server running)"
    assert with_key(config.not_carried, "sendLoadingState").startswith("not carried: sendLoadingState=false")


def test_cameronr_nested_macros_expand_and_env_is_kept() -> None:
    config = corpus(CAMERONR)
    assert [m.name for m in config.models] == [
        "openrouter-laguna", "qwen3-instruct", "qwen3.6-4090", "qwen3.8-3090", "qwen3.8-4090",
        "qwen3.8-ik-dual", "qwen3.8-vllm",
    ]
    single = model(config, "qwen3.8-4090")
    # qwen3_8_iq4_single_cmd = ${ik_llama_base} ${qwen3_8_params} ... ${kv_quant} ...
    assert single.argv[:4] == ("/usr/local/bin/ik-llama-server", "--port", "5803", "--host")
    assert single.argv[single.argv.index("--alias") + 1] == "Qwen3.8-27B"  # quotes removed
    assert single.argv[single.argv.index("--chat-template-kwargs") + 1] == '{"preserve_thinking": true}'
    assert single.argv[-6:] == ("-t", "1", "-tb", "8", "-tm", "8")
    kv = single.argv.index("-khad")
    assert single.argv[kv - 4: kv + 2] == ("-ctk", "q4_0", "-ctv", "q4_0", "-khad", "-vhad")
    assert not any("${" in word for m in config.models for word in m.argv)
    assert single.environment == (("CUDA_VISIBLE_DEVICES", "0"),)
    assert single.aliases == ("qwen3.8-single", "qwen3.8-27B-MTP-IQ4_KS-4090")
    assert model(config, "qwen3.8-ik-dual").environment == (("CUDA_VISIBLE_DEVICES", "0,1"),)
    assert [model(config, n).port for n in ("qwen3-instruct", "qwen3.6-4090", "qwen3.8-3090", "qwen3.8-ik-dual")] \
        == [5800, 5801, 5802, 5804]
    assert with_key(config.not_carried, "globalTTL") == "not carried: globalTTL=3600 (specd keeps one server running)"
    assert with_key(config.not_carried, "profiles").startswith("not carried: profiles={ik, ik-3090, vllm, ik-dual")


def test_cameronr_proxy_only_model_and_remote_docker_model() -> None:
    config = corpus(CAMERONR)
    remote = model(config, "openrouter-laguna")
    assert remote.argv == () and remote.port is None
    assert remote.proxy == "https://openrouter.ai/api/v1"
    assert remote.not_carried[0].startswith("no cmd:")
    assert not any("sk-test" in note for note in remote.not_carried)  # header values are not echoed
    vllm = model(config, "qwen3.8-vllm")
    assert vllm.port is None and vllm.proxy == "http://qwen38-27b-rtx3090-single:18020"
    # the commented-out cmd/cmdStop lines are YAML comments; the live cmd says "batch up"
    assert vllm.argv == ("docker", "compose", "-f", "/home/media/qwen38-27b-rtx3090/docker-compose.yml",
                         "--profile", "batch", "up")
    assert with_key(vllm.not_carried, "cmdStop").endswith("(specd stops the server through systemd)")
    assert with_key(vllm.not_carried, "healthCheckTimeout").startswith("not carried: healthCheckTimeout=600")


def test_cameronr_without_the_api_key_refuses_the_model_that_uses_it_naming_the_variable() -> None:
    config = corpus(CAMERONR, environ={})
    refused = {m.name: m.refused for m in config.models if m.refused}
    assert list(refused) == ["openrouter-laguna"] and "OPENROUTER_API_KEY" in refused["openrouter-laguna"]
    assert len(config.models) == 7  # the other six are read as before


def test_wvdschel_latest_llama_macro_start_port_groups_hooks_filters() -> None:
    config = corpus(WVDSCHEL)
    assert len(config.models) == 18
    gemma = model(config, "gemma3")
    assert gemma.argv == (
        "nice", "/app/llama-server", "--offline", "--port", "10001", "--no-warmup", "-ngl", "999",
        "--cache-type-k", "q8_0", "--cache-type-v", "q8_0", "--flash-attn", "on", "--cont-batching",
        "-np", "1", "-hf", "unsloth/gemma-3-27b-it-qat-GGUF:Q4_0", "-ctx-size", "0",
    )
    assert gemma.port == 10001 and gemma.description == "Gemma3 27B QAT"
    assert model(config, "zerank-1-small").port == 10018  # startPort 10001, 18 models, all use ${PORT}
    assert model(config, "gpt-oss-120b").port == 10002  # "gpt-oss-120b" < "gpt-oss-20b" as strings
    assert model(config, "gpt-oss-20b").port == 10003
    coder = model(config, "qwen2.5-coder-7b")
    assert with_key(coder.not_carried, "filters") == \
        "not carried: filters={strip_params} (specd does not rewrite requests)"
    assert with_key(config.not_carried, "groups").startswith("not carried: groups={big, autocomplete, embed, rerank}")
    assert with_key(config.not_carried, "hooks").startswith("not carried: hooks={on_startup}")
    assert not any(n.startswith("not carried: startPort") for n in config.not_carried)


def test_acerspyro_ports_follow_sorted_ids_not_file_order() -> None:
    config = corpus(ACERSPYRO)
    assert [(m.name, m.port) for m in config.models] == [("gemma-tools", 5800), ("qwen-logic", 5801)]
    logic = model(config, "qwen-logic")
    assert logic.argv[logic.argv.index("--port") + 1] == "5801"
    assert logic.argv[-2:] == ("--reasoning", "on")
    assert logic.not_carried == ("not carried: ttl=600 (specd keeps one server running)",)
    assert with_key(config.not_carried, "listen") == "not carried: listen=0.0.0.0:8000 (no specd equivalent)"


def test_mykola_env_aliases_proxy_and_no_port() -> None:
    config = corpus(MYKOLA)
    assert len(config.models) == 9
    coder = model(config, "qwen2.5-coder_7b")
    assert coder.argv == ("llama-docker", "qwen25-coder7b", "--no-warmup")
    assert coder.environment == (
        ("LLAMA_ARG_MODEL", "/models/qwen2.5-coder_7b-instruct-q4_K_M.gguf"),
        ("LLAMA_ARG_CTX_SIZE", "30000"),
        ("LLAMA_ARG_N_GPU_LAYERS", "99"),
    )
    assert coder.port is None and coder.proxy == "http://qwen25-coder7b:8080"
    assert coder.not_carried == (
        "not carried: checkEndpoint=/health (specd's health gate probes /health)",
        "not carried: ttl=600 (specd keeps one server running)",
    )
    assert model(config, "llama3.1_8b").aliases == ("llama", "llama3", "llama3.1", "gpt-4o-mini", "gpt-3.5-turbo")


# --- llama-swap's rules on small configs --------------------------------------------------------

def test_macros_expand_last_declared_first_and_model_macros_override() -> None:
    config = inline("""
macros:
  base: /models
  path: "${base}/llama"
  tag: global
  msg: "value-${tag}"
models:
  m:
    macros:
      tag: model-level
    cmd: load ${path}/x.gguf ${msg} --port ${PORT}
""")
    assert config.models[0].argv == ("load", "/models/llama/x.gguf", "value-model-level", "--port", "5800")


@pytest.mark.parametrize("macros", [
    "a: '${b}'\n  b: '${a}'",  # a cycle
    "a: 'x-${b}'\n  b: 'y'",  # a forward reference: llama-swap leaves ${b} unexpanded and fails
])
def test_macros_that_cannot_expand_in_one_pass_are_an_error(macros: str) -> None:
    config = inline(f"macros:\n  {macros}\nmodels:\n  m:\n    cmd: run ${{a}} --port ${{PORT}}\n")
    assert re.search(r"^cmd: unknown macro '\$\{[ab]\}'.*declared before", config.models[0].refused)


def test_self_reference_and_reserved_macro_names_are_errors() -> None:
    with pytest.raises(UsageError, match="macro 'r' contains a self-reference"):
        inline("macros:\n  r: 'v-${r}'\nmodels: {}\n")
    with pytest.raises(UsageError, match="macro 'PORT' is reserved"):
        inline("macros:\n  PORT: 1\nmodels: {}\n")


def test_unknown_macro_refuses_its_model_naming_the_key() -> None:
    config = inline("models:\n  m:\n    cmd: run ${nope} --port ${PORT}\n  n:\n    cmd: run --port ${PORT}\n")
    assert config.models[0].refused == "cmd: unknown macro '${nope}'"
    assert config.models[1].argv == ("run", "--port", "5801")  # ports are still handed out in ID order


def test_model_id_in_set_params_by_id_keys_is_expanded_as_llama_swap_does() -> None:
    config = inline("models:\n  m:\n    cmd: run --port ${PORT}\n    filters:\n      setParamsByID:\n"
                    "        '${MODEL_ID}:thinking': {temperature: 0.6}\n")
    assert config.models[0].refused == "" and config.models[0].argv == ("run", "--port", "5800")


def test_missing_env_is_an_error_and_values_are_escaped_like_llama_swap() -> None:
    text = 'models:\n  m:\n    cmd: run --port ${PORT}\n    env: ["TOKEN=${env.TOKEN}"]\n'
    assert "environment variable 'TOKEN' is not set" in inline(text).models[0].refused
    # llama-swap escapes \ and " so the value survives a double-quoted YAML string
    assert inline(text, {"TOKEN": 'a"b\\c'}).models[0].environment == (("TOKEN", 'a"b\\c'),)


def test_env_reference_in_a_yaml_comment_needs_no_variable() -> None:
    config = inline("models:\n  m:\n    # uses ${env.UNSET}\n    cmd: run --port ${PORT}\n")
    assert config.models[0].argv == ("run", "--port", "5800")


def test_yaml_syntax_error_names_file_and_line() -> None:
    with pytest.raises(UsageError, match=r"^inline.yaml line 3: not valid YAML: mapping values are not allowed"):
        inline("models:\n  m:\n    cmd: run a: b\n")


def test_comment_lines_and_continuations_in_cmd() -> None:
    config = inline("""
models:
  m:
    cmd: |
      llama-server \\
        # --ctx-size ${not-a-macro}
        --port ${PORT} \\
        -m "/models/with space.gguf"
""")
    assert config.models[0].argv == ("llama-server", "--port", "5800", "-m", "/models/with space.gguf")


def test_port_goes_only_to_models_that_use_it() -> None:
    config = inline("""
startPort: 9000
models:
  a-remote:
    cmd: docker run thing
    proxy: http://box:8080
  b-local:
    cmd: llama-server --port ${PORT}
""")
    assert [(m.name, m.port) for m in config.models] == [("a-remote", None), ("b-local", 9000)]


def test_port_in_proxy_without_port_in_cmd_is_an_error() -> None:
    assert inline("models:\n  m:\n    cmd: run\n    proxy: http://localhost:${PORT}\n").models[0].refused.startswith(
        "proxy uses ${PORT} but cmd does not")
    assert inline("models:\n  m:\n    cmd: run --port 8080\n").models[0].refused.startswith(
        "cmd does not use ${PORT} and there is no proxy")


def test_duplicate_alias_refuses_the_later_model() -> None:
    config = inline("models:\n  a: {cmd: 'r ${PORT}', aliases: [x]}\n  b: {cmd: 'r ${PORT}', aliases: [x]}\n")
    assert [m.refused for m in config.models] == ["", "alias x is also used by model a"]


def test_macro_scalars_are_written_the_way_go_prints_them() -> None:
    config = inline("""
macros:
  fa: on
  jinja: true
  temp: 0.7
  big: 1000000.0
models:
  m:
    cmd: run -fa ${fa} --jinja ${jinja} --temp ${temp} -n ${big} --port ${PORT}
""")
    assert config.models[0].argv[1:9] == ("-fa", "on", "--jinja", "true", "--temp", "0.7", "-n", "1e+06")


def test_split_follows_golib_posix_rules() -> None:
    # in double quotes a backslash escapes only $ ` " \ ; in single quotes nothing; "" is a word
    assert split_posix(r'a "b\$c\d" ' + "'e\\f g' \"\" h\\ i") == ("a", "b$c\\d", "e\\f g", "", "h i")
    assert split_posix("x 'unterminated") == ("x", "unterminated")  # golib does not fail
