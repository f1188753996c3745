"""The vLLM engine's pure parts: reading a real `vllm serve --help=all`, rendering a vLLM profile into
its argv and unit and reading them back, refusing what the installed vLLM lacks, and the speculative
counters of both engines read from real /metrics pages (tests/corpus/vllm/SOURCES.md)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from specd.engines.facts import LLAMA_SERVER, VLLM, command_facts
from specd.engines.metrics import SpecCounters, in_progress, parse_counters
from specd.engines.vllm_flags import VllmFlags, interpreter_of, parse_serve_help
from specd.engines.vllm_render import build_vllm_argv, model_problems, speculative_json
from specd.errors import PreflightError, ProfileError
from specd.profiles.load import load_profile
from specd.tune.activity import judge
from specd.tune.bench import Result
from specd.unit.parse import parse_unit
from specd.unit.render import default_template_path, render_unit

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "vllm"
HELP = (CORPUS / "serve-help-all-0.32.0-cpu.txt").read_text()


@pytest.fixture(scope="module")
def flags() -> VllmFlags:
    return parse_serve_help("/opt/vllm/bin/vllm", HELP)


def write(directory: Path, name: str, text: str) -> None:
    directory.mkdir(exist_ok=True)
    (directory / f"{name}.toml").write_text(text)


def vllm_profile(tmp_path: Path, extra: str = "", spec: str = "", name: str = "v") -> str:
    model = tmp_path / "hf"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")
    body = (f'engine = "vllm"\nbinary = "/opt/vllm/bin/vllm"\nmodel = "{model}"\nalias = "qwen"\nport = 8081\n'
            f"{extra}\n[vllm]\nmax_model_len = 4096\ngpu_memory_utilization = 0.85\n")
    write(tmp_path / "profiles", name, body + (f"[vllm.speculative_config]\n{spec}" if spec else ""))
    return name


def test_the_real_help_gives_options_their_spellings_and_the_speculative_methods(flags: VllmFlags) -> None:
    assert flags.version == "0.32.0"
    assert flags.canonical("--device-memory-utilization") == "--gpu-memory-utilization"
    assert flags.canonical("-tp") == "--tensor-parallel-size" and flags.canonical("-q") == "--quantization"
    assert flags.has("--no-enable-sleep-mode") and flags.has("--speculative-config.method")
    assert not flags.has("--spec-type") and not flags.has("--ctx-size")  # llama-server's, not vLLM's
    assert {"mtp", "eagle3", "dflash", "draft_model", "ngram", "suffix"} <= set(flags.speculative_methods)
    assert "None" not in flags.speculative_methods
    assert flags.choices_of("--dtype") == ("auto", "bfloat16", "float", "float16", "float32", "half")
    assert "--max-model-len" in flags.valued and "--headless" not in flags.valued


def test_a_help_that_is_not_vllms_is_refused() -> None:
    with pytest.raises(PreflightError, match="no --served-model-name"):
        parse_serve_help("/usr/bin/llama-server", "  --port PORT   the port\n  --alias NAME  the alias\n")


def test_a_vllm_profile_renders_vllm_serve_with_its_speculative_config_as_json(tmp_path: Path,
                                                                                flags: VllmFlags) -> None:
    name = vllm_profile(tmp_path, extra='args = ["--enable-prefix-caching"]',
                        spec='method = "dflash"\nmodel = "/models/drafter"\nnum_speculative_tokens = 15\n'
                             "num_speculative_tokens_per_batch_size = [[1, 4, 15], [5, 64, 4]]\n")
    profile = load_profile(tmp_path / "profiles", name)
    argv = build_vllm_argv(profile, flags)
    assert argv[:3] == ["/opt/vllm/bin/vllm", "serve", str(tmp_path / "hf")]
    words = " ".join(argv[3:])
    assert "--served-model-name qwen --host 127.0.0.1 --port 8081" in words
    assert "--max-model-len 4096 --gpu-memory-utilization 0.85" in words
    config = json.loads(argv[argv.index("--speculative-config") + 1])
    assert config == {"method": "dflash", "model": "/models/drafter", "num_speculative_tokens": 15,
                      "num_speculative_tokens_per_batch_size": [[1, 4, 15], [5, 64, 4]]}
    assert list(config) == ["method", "model", "num_speculative_tokens", "num_speculative_tokens_per_batch_size"]
    assert argv[-1] == "--enable-prefix-caching"
    assert profile.speculative.type == "dflash"  # what the tuner and verify read as "this profile speculates"
    # the unit runs exactly that argv, and reading the unit back finds the served name and port
    text = render_unit(profile, argv, scope="user", template=default_template_path().read_text())
    assert "Description=vllm qwen (specd profile v)" in text
    command = parse_unit(text)
    assert command.argv == argv and command.alias == "qwen" and command.base_url == "http://127.0.0.1:8081"


def test_what_the_installed_vllm_lacks_is_refused_before_anything_changes(tmp_path: Path,
                                                                          flags: VllmFlags) -> None:
    cases = {
        'method = "dflsh"\nmodel = "/m"\n': "speculative method 'dflsh' is not offered by the installed vLLM 0.32.0",
        'method = "eagle3"\n': "speculative method 'eagle3' needs a drafter",
        'model = "/m"\nmethod = "ngram"\nprompt_lokup_max = 3\n': "'prompt_lokup_max' is not known",
    }
    known = VllmFlags(flags.binary, flags.groups, flags.valued, flags.choices,
                      speculative_keys=("method", "model", "num_speculative_tokens", "prompt_lookup_max"),
                      version=flags.version)
    for number, (spec, message) in enumerate(cases.items()):
        profile = load_profile(tmp_path / "profiles", vllm_profile(tmp_path, spec=spec, name=f"p{number}"))
        with pytest.raises(PreflightError, match=message):
            build_vllm_argv(profile, known)
    with pytest.raises(PreflightError, match="did you mean 'prompt_lookup_max'"):
        build_vllm_argv(load_profile(tmp_path / "profiles", "p2"), known)
    typo = load_profile(tmp_path / "profiles", vllm_profile(tmp_path, extra='args = ["--max-num-seq", "8"]',
                                                            name="typo"))
    with pytest.raises(PreflightError, match=r"does not accept --max-num-seq \(not in its --help=all; vLLM 0.32.0"):
        build_vllm_argv(typo, flags)
    twice = load_profile(tmp_path / "profiles", vllm_profile(tmp_path, extra='args = ["--max-model-len", "8"]',
                                                             name="twice"))
    with pytest.raises(ProfileError, match="'args' repeats --max-model-len"):
        build_vllm_argv(twice, flags)


def test_keys_an_engine_would_not_see_are_refused_naming_the_key(tmp_path: Path) -> None:
    vllm_profile(tmp_path, extra="ctx_size = 4096\nflash_attn = \"on\"", name="mixed")
    with pytest.raises(ProfileError) as mixed:
        load_profile(tmp_path / "profiles", "mixed")
    message = mixed.value.message
    assert "'ctx_size' is a llama-server setting" in message and "[vllm] max_model_len" in message
    assert "'flash_attn' is a llama-server setting" in mixed.value.message
    write(tmp_path / "profiles", "llama",
          'binary = "/b"\nmodel = "/m.gguf"\nalias = "a"\nport = 1\n[vllm]\ndtype = "auto"\n')
    with pytest.raises(ProfileError, match=r"has a \[vllm\] table but runs llama-server"):
        load_profile(tmp_path / "profiles", "llama")
    write(tmp_path / "profiles", "nameless", 'engine = "vllm"\nbinary = "/b"\nmodel = "/m"\nport = 1\n')
    with pytest.raises(ProfileError, match="needs 'alias'"):
        load_profile(tmp_path / "profiles", "nameless")
    write(tmp_path / "profiles", "other", 'engine = "sglang"\nbinary = "/b"\nmodel = "/m"\nalias = "a"\nport = 1\n')
    with pytest.raises(ProfileError, match="must be one of llama-server, vllm, not 'sglang'"):
        load_profile(tmp_path / "profiles", "other")
    write(tmp_path / "profiles", "badspec", 'engine = "vllm"\nbinary = "/b"\nmodel = "/m"\nalias = "a"\nport = 1\n'
          "[vllm.speculative_config]\nnum_speculative_tokens_per_batch_size = [[1, 2]]\n")
    with pytest.raises(ProfileError, match="triples"):
        load_profile(tmp_path / "profiles", "badspec")


def test_a_model_directory_without_config_json_is_named(tmp_path: Path) -> None:
    name = vllm_profile(tmp_path)
    (tmp_path / "hf" / "config.json").unlink()
    problems = model_problems(load_profile(tmp_path / "profiles", name))
    assert problems == [(f"{tmp_path / 'hf'}: a model directory without config.json (the profile's model); vLLM "
                        "cannot load it")]


def test_vllm_command_lines_are_recognised_and_read_back() -> None:
    served = command_facts(shlex.split("/opt/vllm/bin/vllm serve /models/q --served-model-name q1 q2 --port 9000"))
    assert served is not None and (served.model, served.served_name, served.port) == ("/models/q", "q1", 9000)
    bare = command_facts(shlex.split("toolbox run -c box vllm serve Qwen/Qwen3-0.6B --host 0.0.0.0"))
    assert bare is not None and (bare.served_name, bare.port) == ("Qwen/Qwen3-0.6B", 8000)  # vLLM's defaults
    module = command_facts(shlex.split("python -m vllm.entrypoints.openai.api_server --model /m --port 8001"))
    assert module is not None and (module.served_name, module.port) == ("/m", 8001)
    assert command_facts(shlex.split("/usr/bin/llama-server -m /m.gguf --port 8080")) is None
    assert parse_unit('[Service]\nExecStart=/usr/bin/llama-server -m /m/x.gguf\n').base_url == "http://127.0.0.1:8080"


def test_speculative_counters_of_both_engines_from_their_real_metrics_pages() -> None:
    vllm_page = (CORPUS / "metrics-ngram-0.32.0-cpu.txt").read_text()
    llama_page = (CORPUS / "llama-server-metrics-ngram-simple.txt").read_text()
    assert parse_counters(vllm_page, VLLM) == SpecCounters(51, 48)
    assert parse_counters(llama_page, LLAMA_SERVER) == SpecCounters(98, 70)  # = the two answers' timings summed
    assert parse_counters(llama_page, VLLM) is None and parse_counters("garbage {", VLLM) is None
    assert in_progress(vllm_page, VLLM) == 0 and in_progress(llama_page, VLLM) is None
    assert SpecCounters(60, 50) - SpecCounters(51, 48) == SpecCounters(9, 2)


def _answer(tokens: int) -> Result:
    return Result("v", 0, "code", 10, tokens, 0.0, 100.0, 100.0, has_timings=False)


def test_vllm_answers_without_timings_are_judged_by_the_servers_counters() -> None:
    answers = [_answer(16), _answer(16)]
    assert judge("v", True, answers).verdict == "unknown"  # no timings and no counters: nothing to say
    assert judge("v", True, answers, SpecCounters(20, 12)).verdict == "active"
    never = judge("v", True, answers, SpecCounters(0, 0))
    assert never.verdict == "inactive" and never.excluded and "spec_decode counters" in never.sentence
    assert judge("v", False, answers, SpecCounters(0, 0)).verdict == "plain"


def test_the_interpreter_of_a_console_script_is_its_shebang(tmp_path: Path) -> None:
    script = tmp_path / "vllm"
    script.write_text("#!/opt/vllm/bin/python3.11\nimport sys\n")
    assert interpreter_of(script) == Path("/opt/vllm/bin/python3.11")
    script.write_text("#!/usr/bin/env python3\n")
    assert interpreter_of(script) is None  # env: which python is not known here


def test_speculative_json_is_absent_without_a_table(tmp_path: Path) -> None:
    profile = load_profile(tmp_path / "profiles", vllm_profile(tmp_path))
    assert profile.vllm is not None and speculative_json(profile.vllm) is None
    assert profile.speculative.type == "none"


def test_the_readme_lists_every_vllm_key() -> None:
    from specd.profiles.engine_keys import vllm_key_table

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert vllm_key_table() in readme, ("README.md's [vllm] key table is stale: paste "
                                        "`python -c 'from specd.profiles.engine_keys import vllm_key_table; "
                                        "print(vllm_key_table())'`")


UNITS = CORPUS / "units"


def _options(argv: list[str], flags: VllmFlags) -> list[tuple[str, ...]]:
    """An argv after `serve MODEL` as (option, its values...) groups, in a comparable order."""
    groups: list[tuple[str, ...]] = []
    for word in argv:
        if word.startswith("-"):
            groups.append((flags.canonical(word),))
        elif groups:
            groups[-1] = (*groups[-1], word)
    return sorted(groups)


@pytest.mark.parametrize("unit", sorted(p.name for p in UNITS.glob("*.service")))
def test_a_real_vllm_unit_imports_to_a_profile_that_renders_the_same_server(unit: str, tmp_path: Path,
                                                                            flags: VllmFlags) -> None:
    from specd.unit.importer import import_unit

    source = UNITS / unit
    original = parse_unit(source.read_text(), str(source)).argv
    target = import_unit(source, tmp_path, "imported")
    profile = load_profile(tmp_path, "imported")
    assert profile.engine == "vllm" and target.exists()
    rendered = build_vllm_argv(profile, flags)
    facts, back = command_facts(original), command_facts(rendered)
    assert facts is not None and back is not None
    assert (back.model, back.served_name, back.port) == (facts.model, facts.served_name, facts.port)
    expected = original[original.index("--model") + 2:] if "--model" in original else original[3:]
    expected = [w for i, w in enumerate(expected) if w != "--model" and expected[i - 1:i] != ["--model"]]
    if "--port" not in original:
        expected += ["--port", "8000"]  # vLLM's default, written out
    if "--served-model-name" not in original:
        expected += ["--served-model-name", str(facts.served_name)]
    if "--host" not in original:
        expected += ["--host", "0.0.0.0"]  # vLLM's default, written out (specd's own default is loopback)
    assert _options(rendered[3:], flags) == _options(expected, flags)


def test_a_vllm_serve_cmd_in_a_llama_swap_config_becomes_a_vllm_profile(tmp_path: Path) -> None:
    from specd.unit.swap_import import import_llama_swap

    model = tmp_path / "qwen-hf"
    config = tmp_path / "config.yaml"
    config.write_text("models:\n  qwen-vllm:\n    aliases: [qwen]\n    cmd: >\n"
                      f"      /opt/vllm/bin/vllm serve {model}\n"
                      "      --served-model-name qwen3 --port ${PORT} --max-model-len 8192\n"
                      "      --speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": 4}'\n")
    import_llama_swap(config, tmp_path / "profiles")
    profile = load_profile(tmp_path / "profiles", "qwen-vllm")
    assert profile.engine == "vllm" and profile.model == model and profile.alias == "qwen3,qwen-vllm,qwen"
    assert profile.vllm is not None and profile.vllm.max_model_len == 8192
    assert dict(profile.vllm.speculative_config) == {"method": "ngram", "num_speculative_tokens": 4}


def test_a_failed_vllm_start_is_explained_by_the_cause_above_its_last_lines() -> None:
    from specd.engines.journal import condense

    log = (CORPUS / "log-gpu-memory-0.32.0-cpu.txt").read_text()
    shown = condense(log).splitlines()
    assert "ValueError: Available memory on node 0" in shown[0] and "gpu-memory-utilization" in shown[0]
    assert shown[-1].startswith("RuntimeError: Engine core initialization failed") and len(shown) == 17
    assert not any("Too many open files" in line for line in shown[:2])  # a warning that quotes an error is none
    llama = "\n".join(f"srv  load_model: line {n}" for n in range(40)) + "\nmain: exiting due to model loading error"
    assert condense(llama) == "\n".join(llama.splitlines()[-15:])  # llama-server's lines: the last 15, as before


def test_a_hub_model_is_served_by_its_id_and_a_gguf_quant_is_refused(tmp_path: Path, flags: VllmFlags) -> None:
    write(tmp_path / "profiles", "hub", 'engine = "vllm"\nbinary = "/opt/vllm/bin/vllm"\nhf_repo = "Qwen/Qwen3-0.6B"\n'
                                        'alias = "qwen"\nport = 8000\n')
    profile = load_profile(tmp_path / "profiles", "hub")
    assert build_vllm_argv(profile, flags)[:3] == ["/opt/vllm/bin/vllm", "serve", "Qwen/Qwen3-0.6B"]
    assert model_problems(profile) == []
    write(tmp_path / "profiles", "quant",
          'engine = "vllm"\nbinary = "/b"\nhf_repo = "o/m:Q4_K_M"\nalias = "a"\nport = 1\n')
    with pytest.raises(ProfileError, match="names a GGUF quant"):
        load_profile(tmp_path / "profiles", "quant")
