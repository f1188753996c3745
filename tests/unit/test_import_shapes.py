"""Issue 34's shapes, pure (no systemd, no binary on this box: its flags cannot be checked here):
the served id, host and port clients saw stay the same; every word keeps its place; only
llama-server (or a fork) becomes a profile; refusals name their cause. The help text is a verbatim
excerpt of the reference llama-server's `--help` (llama.cpp as vendored in llama-cpp-python 0.3.36)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from specd.errors import UsageError
from specd.profiles.flags import parse_help
from specd.profiles.load import load_profile
from specd.unit.importer import ImportResult, profile_from_unit, write_profile
from specd.unit.render import build_argv
from specd.unit.specifiers import UnitContext
from tests.unit.reference_help import REFERENCE_HELP

CTX = UnitContext("llama-server.service", "user", home="/home/ann", user="ann", uid=1000)
HELP = REFERENCE_HELP
FLAGS = parse_help("/opt/llama-server", HELP)


def imported(exec_start: str, before: str = "", unit: str = "llama-server.service") -> ImportResult:
    return profile_from_unit(f"[Service]\n{before}ExecStart={exec_start}\n", f"/etc/systemd/system/{unit}", "d",
                             UnitContext(unit, "user", home="/home/ann", user="ann", uid=1000))


def rendered(result: ImportResult, tmp_path: Path) -> list[str]:
    write_profile(tmp_path / "p.toml", result, source="test")
    return build_argv(load_profile(tmp_path, "p"), FLAGS)


# --- what clients see --------------------------------------------------------------------------------

def test_a_model_path_with_no_alias_keeps_the_id_llama_server_reports_and_writes_no_alias(tmp_path: Path) -> None:
    result = imported("/opt/llama-server -m /models/Qwen3-8B-Q4_K_M.gguf")
    assert result.data["alias"] == "/models/Qwen3-8B-Q4_K_M.gguf" and result.data["implicit"] == ["alias", "host",
                                                                                                   "port"]
    assert rendered(result, tmp_path) == ["/opt/llama-server", "--model", "/models/Qwen3-8B-Q4_K_M.gguf"]


def test_an_hf_repo_with_no_alias_keeps_the_repo_as_given(tmp_path: Path) -> None:
    result = imported("/opt/llama-server -hf unsloth/Qwen3-8B-GGUF:Q4_K_M --port 9000")
    assert result.data["alias"] == "unsloth/Qwen3-8B-GGUF:Q4_K_M" and result.data["implicit"] == ["alias", "host"]
    assert rendered(result, tmp_path) == ["/opt/llama-server", "--hf-repo", "unsloth/Qwen3-8B-GGUF:Q4_K_M",
                                          "--port", "9000"]


def test_an_inheriting_profile_with_another_model_keeps_the_id_by_writing_it_as_alias(tmp_path: Path) -> None:
    write_profile(tmp_path / "current.toml", imported("/opt/llama-server -m /models/a.gguf"), source="test")
    (tmp_path / "other.toml").write_text('inherits = "current"\nmodel = "/models/b.gguf"\n')
    assert build_argv(load_profile(tmp_path, "other"), FLAGS) == [
        "/opt/llama-server", "--model", "/models/b.gguf", "--alias", "/models/a.gguf"]


def test_a_host_or_port_default_that_this_build_does_not_say_is_written(tmp_path: Path) -> None:
    result = imported("/opt/llama-server -m /models/a.gguf --alias a")
    write_profile(tmp_path / "p.toml", result, source="test")
    quiet = parse_help("/opt/llama-server", HELP.replace("(default: 8080)", ""))
    assert build_argv(load_profile(tmp_path, "p"), quiet)[-2:] == ["--port", "8080"]


# --- every word in its place -------------------------------------------------------------------------

def test_a_subcommand_stays_right_after_the_binary(tmp_path: Path) -> None:
    result = imported("/usr/local/bin/llama serve --models-dir /srv/models --port 9001")
    assert result.data["binary_args"] == ["serve"] and result.data["models_dir"] == "/srv/models"
    assert rendered(result, tmp_path) == ["/usr/local/bin/llama", "serve", "--models-dir", "/srv/models",
                                          "--port", "9001"]


def test_a_wrapper_scripts_own_arguments_stay_before_the_flags(tmp_path: Path) -> None:
    # jnb666/gpt-go's shape: the model first, llama-server flags after.
    result = imported("/home/john/gpt-go/scripts/llama-server.sh gpt-oss-120b-F16.gguf --n-gpu-layers 999 "
                      "--n-cpu-moe 26")
    assert result.data["binary_args"] == ["gpt-oss-120b-F16.gguf"] and not result.checked
    assert rendered(result, tmp_path) == ["/home/john/gpt-go/scripts/llama-server.sh", "gpt-oss-120b-F16.gguf",
                                          "--n-gpu-layers", "999", "--n-cpu-moe", "26"]


def test_a_word_after_the_flags_of_an_unchecked_binary_keeps_its_place_and_all_after_it(tmp_path: Path) -> None:
    result = imported("/opt/llama-server --port 9000 -m /m.gguf EXTRA -ngl 9")
    assert result.data["args"] == ["EXTRA", "-ngl", "9"] and "n_gpu_layers" not in result.data
    assert rendered(result, tmp_path)[-3:] == ["EXTRA", "-ngl", "9"]


def test_a_template_instance_resolves_its_specifiers_and_the_template_itself_asks_for_one(tmp_path: Path) -> None:
    # mrsimpson/local-llm's launcher: a script named llama-server taking a backend and the instance.
    launcher = "%h/local-llm/llama-server rocm %i"
    result = imported(launcher, unit="llama-server@qwen3-coder.service")
    assert result.data["binary_args"] == ["rocm", "qwen3-coder"]
    assert rendered(result, tmp_path) == ["/home/ann/local-llm/llama-server", "rocm", "qwen3-coder"]
    with pytest.raises(UsageError, match=r"%i \(the unit's instance\) has no value in the template "
                                         r"llama-server@.service itself: .*--from llama-server@INSTANCE.service"):
        imported(launcher, unit="llama-server@.service")


# --- only llama-server ------------------------------------------------------------------------------

@pytest.mark.parametrize(("exec_start", "says"), [
    ("/usr/bin/python3 -m llama_cpp.server --model /m.gguf --port 8000 --n_gpu_layers -1",
     "runs the python3 module llama_cpp.server \\(llama-cpp-python's server\\), not llama.cpp's llama-server"),
    ("/srv/venv/bin/python -m llama_cpp.server --model /m.gguf", "python module llama_cpp.server"),
    ("/usr/local/bin/ollama serve", "runs ollama \\(Ollama\\)"),
])
def test_other_servers_are_refused_naming_the_program(exec_start: str, says: str) -> None:
    with pytest.raises(UsageError, match=says):
        imported(exec_start)


def test_a_fork_absent_here_is_accepted_by_its_name_and_says_its_flags_were_not_checked() -> None:
    result = imported("/opt/beellama/build/bin/beellama-server -m /m.gguf --spec-type dflash -md /d.gguf")
    assert not result.checked and result.data["speculative"]["type"] == "dflash"
    said = [row.became for row in result.rows if row.source == "/opt/beellama/build/bin/beellama-server"]
    assert said and "is not on this box" in said[0] and "its flags could not be checked" in said[0]


def test_a_bare_value_flag_before_another_flag_is_kept_alone_and_the_next_flag_is_read(tmp_path: Path) -> None:
    result = imported("/opt/llama-server -m /m.gguf -fa --n-gpu-layers 99 --jinja")
    assert result.data["args"] == ["-fa"] and result.data["n_gpu_layers"] == 99 and result.data["jinja"] is True
    assert "flash_attn" not in result.data


def test_a_flag_given_twice_keeps_the_last_value_as_llama_server_does_and_says_so(tmp_path: Path) -> None:
    result = imported("/opt/llama-server -m /m.gguf -ngl 99 --port 9 -ngl 80")
    assert result.data["n_gpu_layers"] == 80 and "args" not in result.data
    dropped = [row.became for row in result.rows if row.source == "-ngl 99"]
    assert dropped and "llama-server takes the last value, not 99" in dropped[0]
    assert "--n-gpu-layers" in rendered(result, tmp_path)


def test_two_model_sources_are_refused_naming_both() -> None:
    with pytest.raises(UsageError, match=r"names two model sources \(--model /m.gguf and --models-dir /srv\)"):
        imported("/opt/llama-server --model /m.gguf --models-dir /srv")


def test_a_model_url_alone_is_refused_not_taken_for_router_mode() -> None:
    with pytest.raises(UsageError, match="the model comes from --model-url only"):
        imported("/opt/llama-server -mu https://example.invalid/m.gguf --port 9000")


# --- refusals that name the cause -------------------------------------------------------------------

def test_an_empty_host_names_its_variable_and_the_optional_file_it_would_come_from() -> None:
    with pytest.raises(UsageError) as caught:
        imported("/opt/llama-server -m /m.gguf --host ${HOST} --port 8080",
                 before="EnvironmentFile=-/etc/llama/llama.env\n")
    message = caught.value.message
    assert "--host ''" in message and "${HOST} is not set" in message
    assert "it would come from EnvironmentFile=-/etc/llama/llama.env (optional), which does not exist" in message


def test_a_bare_unset_variable_that_leaves_a_flag_without_value_names_it() -> None:
    with pytest.raises(UsageError, match=r"--port has no value \(it is followed by --jinja\) \(\$\{PORT\} is not set"):
        imported("/opt/llama-server -m /m.gguf --port $PORT --jinja")


def test_host_name_specifiers_resolve_as_systemd_resolves_them() -> None:
    host = socket.gethostname()
    result = imported("/opt/llama-server -m /m.gguf --host %H --alias %l-llm")
    assert (result.data["host"], result.data["alias"]) == (host, host.split(".")[0] + "-llm")


def test_percent_home_is_the_host_name_not_an_unknown_specifier() -> None:
    host = socket.gethostname()
    with pytest.raises(UsageError) as caught:  # perminder-klair/pi-llama: systemd refuses it too
        imported("%HOME%/llama.cpp/build/bin/llama-server -m %HOME%/m.gguf")
    message = caught.value.message
    assert f"runs '{host}OME%/llama.cpp/build/bin/llama-server'" in message
    assert "%H in '%HOME%/llama.cpp/build/bin/llama-server' is" in message and "the host name" in message
    assert "write %h for the home directory" in message


@pytest.mark.parametrize(("word", "says"), [
    ("/m/%z.gguf", "%z in '/m/%z.gguf' is not a systemd specifier, so systemd refuses the unit"),
    ("/run/%b/m.gguf", "%b in '/run/%b/m.gguf': the boot ID changes at every boot"),
])
def test_specifiers_systemd_refuses_or_that_change_are_refused_naming_them(word: str, says: str) -> None:
    with pytest.raises(UsageError, match=says):
        imported(f"/opt/llama-server -m {word}")


def test_the_specifier_table_of_systemd_252() -> None:
    context = UnitContext("llama-ab@x-y.service", "system", home="/root", user="root", uid=0,
                          fragment="/etc/systemd/system/llama-ab@.service")
    values = {code: context.specifier(code) for code in "fgGsSLTVyYjJpPiI"}
    assert values == {"f": "/x/y", "g": "root", "G": "0", "s": "/bin/sh", "S": "/var/lib", "L": "/var/log",
                      "T": "/tmp", "V": "/var/tmp", "y": "/etc/systemd/system/llama-ab@.service",
                      "Y": "/etc/systemd/system", "j": "ab", "J": "ab", "p": "llama-ab", "P": "llama/ab",
                      "i": "x-y", "I": "x/y"}
    user = UnitContext("u.service", "user", home="/home/ann", user="ann", uid=1000)
    assert (user.specifier("S"), user.specifier("L")) == ("/home/ann/.config", "/home/ann/.config/log")
    assert context.specifier("z") is None


def test_draft_settings_with_nothing_to_draft_stay_as_written(tmp_path: Path) -> None:
    # cameronr's llama-swap model: -ngld 99 with no draft model and no --spec-type.
    result = imported("/opt/llama-server -m /m.gguf -ngld 99 -c 4096")
    assert "speculative" not in result.data and result.data["args"] == ["-ngld", "99"]
    assert rendered(result, tmp_path)[-2:] == ["-ngld", "99"]


def test_a_flag_given_beside_its_variable_stays_a_flag(tmp_path: Path) -> None:
    # joelvanveluwen/outbush-ai: --host/--port on the command line and LLAMA_ARG_HOST/PORT in Environment=.
    result = imported("/opt/llama-server -m /m.gguf --host 127.0.0.1 --port 8080",
                      before="Environment=LLAMA_ARG_HOST=127.0.0.1\nEnvironment=LLAMA_ARG_PORT=8080\n")
    assert rendered(result, tmp_path) == ["/opt/llama-server", "--model", "/m.gguf", "--host", "127.0.0.1",
                                          "--port", "8080"]
    only_variables = imported("/opt/llama-server -m /m.gguf", before="Environment=LLAMA_ARG_PORT=9001\n")
    assert only_variables.data["implicit"] == ["port", "alias", "host"]
    assert rendered(only_variables, tmp_path) == ["/opt/llama-server", "--model", "/m.gguf"]


def test_a_gate_that_runs_another_server_after_its_options_is_refused_naming_it() -> None:
    # tropikandy/memgate's llama-swap models: memgate OPTIONS -- python -m mtplx.server.openai --model ... --port ...
    with pytest.raises(UsageError, match=r"runs memgate, which runs /opt/venv/bin/python -m mtplx.server.openai"):
        imported("/usr/local/bin/memgate --require-free-mb 10240 -- /opt/venv/bin/python -m mtplx.server.openai "
                 "--model /m --host 127.0.0.1 --port 9200")
    launched = imported("/usr/local/bin/memgate --require-free-mb 10240 -- /opt/llama/llama-server -m /m.gguf")
    assert launched.data["launcher"] == ["/usr/local/bin/memgate", "--require-free-mb", "10240", "--"]
