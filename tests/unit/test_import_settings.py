"""What llama-server does on its own, which import must see too: router mode when no model is named,
settings from LLAMA_ARG_* variables, a Unix-socket host (llama-server listens there with no port), and
refusals that name the real cause (a model variable nothing sets). The help text below is a verbatim
excerpt of the reference llama-server's `--help` (llama.cpp as vendored in llama-cpp-python 0.3.36)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specd.errors import PreflightError, ProfileError, UsageError
from specd.profiles.flags import parse_help
from specd.profiles.load import load_profile
from specd.unit.importer import ImportResult, profile_from_unit, write_profile
from specd.unit.render import build_argv
from specd.unit.specifiers import UnitContext
from tests.unit.reference_help import REFERENCE_HELP

CTX = UnitContext("llama-server.service", "user", home="/home/ann", user="ann", uid=1000)
HELP = REFERENCE_HELP
FLAGS = parse_help("/opt/llama-server", HELP)


def imported(unit: str) -> ImportResult:
    return profile_from_unit(unit, "/etc/systemd/system/llama-server.service", "d", CTX)


def rendered(result: ImportResult, tmp_path: Path, help_text: str = HELP) -> list[str]:
    write_profile(tmp_path / "p.toml", result, source="test")
    return build_argv(load_profile(tmp_path, "p"), parse_help("/opt/llama-server", help_text))


def test_no_model_is_router_mode_over_the_cache_as_llama_server_does_it(tmp_path: Path) -> None:
    # The Arch package's unit with its shipped /etc/conf.d/llama.cpp (LLAMA_ARGS=""): llama-server with no model.
    result = imported('[Service]\nEnvironment=LLAMA_ARGS=\nExecStart=/opt/llama-server $LLAMA_ARGS\n')
    assert result.data["router"] is True and "model" not in result.data and "alias" not in result.data
    said = [row.became for row in result.rows if row.became.startswith("router = true")]
    assert said and "download cache" in said[0]
    # llama-server's defaults (its --help says them) are not written: the server starts as the unit started it.
    assert rendered(result, tmp_path) == ["/opt/llama-server"]
    assert result.data["implicit"] == ["host", "port"]
    old_build = HELP.split("--models-dir")[0]
    with pytest.raises(PreflightError, match="has no router mode"):
        rendered(result, tmp_path, old_build)


def test_settings_from_llama_arg_variables_are_the_profiles_and_stay_variables(tmp_path: Path) -> None:
    result = imported("[Service]\nEnvironment=LLAMA_ARG_MODEL=/m/qwen.gguf LLAMA_ARG_PORT=9001 "
                      "LLAMA_ARG_CTX_SIZE=8192\n"
                      "ExecStart=/opt/llama-server --host 0.0.0.0\n")
    # With no --alias, llama-server serves the model path as given: that is the id clients keep seeing.
    assert (result.data["model"], result.data["port"], result.data["alias"]) == ("/m/qwen.gguf", 9001, "/m/qwen.gguf")
    assert "router" not in result.data  # the model comes from the environment: not router mode
    # The server keeps reading them from its environment: no --model, --port or --alias flag is added.
    assert rendered(result, tmp_path) == ["/opt/llama-server", "--host", "0.0.0.0"]
    assert load_profile(tmp_path, "p").env == (("LLAMA_ARG_CTX_SIZE", "8192"), ("LLAMA_ARG_MODEL", "/m/qwen.gguf"),
                                               ("LLAMA_ARG_PORT", "9001"))


def test_a_unix_socket_host_imports_with_no_port_and_renders_the_same_argv(tmp_path: Path) -> None:
    # tests/corpus/units/AvaronInc--core--llama-server.service's shape: llama-server listens on the socket.
    result = imported("[Service]\nExecStart=/opt/llama-server --model /m.gguf --host /var/run/llama.sock\n")
    assert result.data["host"] == "/var/run/llama.sock" and "port" not in result.data
    assert rendered(result, tmp_path) == ["/opt/llama-server", "--model", "/m.gguf", "--host", "/var/run/llama.sock"]
    assert load_profile(tmp_path, "p").base_url == "http+unix://socket/%2Fvar%2Frun%2Fllama.sock"
    # A --port beside the socket does nothing in llama-server; it stays in args, as written.
    beside = imported("[Service]\nExecStart=/opt/llama-server -m /m.gguf --host /run/l.sock --port 9000\n")
    assert rendered(beside, tmp_path) == ["/opt/llama-server", "--model", "/m.gguf", "--host", "/run/l.sock",
                                          "--port", "9000"]
    # Set by LLAMA_ARG_HOST, with LLAMA_ARG_PORT ignored by the server: both stay variables, no flag is added.
    variables = imported("[Service]\nEnvironment=LLAMA_ARG_HOST=/run/l.sock LLAMA_ARG_PORT=9000\n"
                         "ExecStart=/opt/llama-server -m /m.gguf\n")
    assert (variables.data["host"], "port" in variables.data) == ("/run/l.sock", False)
    assert rendered(variables, tmp_path) == ["/opt/llama-server", "--model", "/m.gguf"]


def test_a_relative_socket_host_is_refused_naming_the_working_directory() -> None:
    with pytest.raises(UsageError, match=r"ends in .sock, so llama-server listens on a Unix socket at that path "
                                         r"relative to its working directory"):
        imported("[Service]\nExecStart=/opt/llama-server -m /m.gguf --host llama.sock\n")


def test_a_model_whose_variable_nothing_sets_is_refused_naming_the_variable_and_the_file() -> None:
    unit = ("[Service]\nEnvironmentFile=-%h/.config/llama-server/current.env\n"
            "ExecStart=%h/llama/build/bin/llama-server --model ${LLAMA_MODEL} $LLAMA_ARGS\n")
    with pytest.raises(UsageError) as caught:
        imported(unit)
    assert "--model is given an empty value" in caught.value.message
    assert "${LLAMA_MODEL} is not set" in caught.value.message  # the variable of --model's own word
    assert ("it would come from EnvironmentFile=-/home/ann/.config/llama-server/current.env (optional), which does "
            "not exist here") in caught.value.message


def test_a_relative_model_path_keeps_its_words_and_its_served_id_under_the_units_working_directory(
        tmp_path: Path) -> None:
    # gpt-lab-summer-2026/chess-machine's shape: llama-server opens models/q.gguf in WorkingDirectory= and, with
    # no --alias, serves the path as given. The import keeps both: the same argv, the same id, the same file.
    result = imported("[Service]\nWorkingDirectory=/srv/llama\nExecStart=/opt/llama-server -m models/q.gguf "
                      "-c 2048 --port 8080\n")
    assert result.data["model"] == "models/q.gguf" and result.data["alias"] == "models/q.gguf"
    assert result.data["systemd"]["Service"]["WorkingDirectory"] == "/srv/llama"
    argv = rendered(result, tmp_path)
    assert argv[argv.index("--model") + 1] == "models/q.gguf" and "--alias" not in argv
    profile = load_profile(tmp_path, "p")
    assert profile.model == Path("/srv/llama/models/q.gguf")  # preflight looks for the file llama-server opens
    assert Path("/srv/llama/models/q.gguf") in profile.files


def test_a_relative_model_path_without_a_working_directory_is_refused_naming_it() -> None:
    with pytest.raises(UsageError, match=r"--model models/q.gguf is a relative path; llama-server opens it relative "
                                         r"to its working directory, and the unit sets no absolute WorkingDirectory="):
        imported("[Service]\nExecStart=/opt/llama-server -m models/q.gguf\n")
    with pytest.raises(UsageError, match=r"\(it sets 'relative/dir'\)"):
        imported("[Service]\nWorkingDirectory=relative/dir\nExecStart=/opt/llama-server -m models/q.gguf\n")


def test_a_profile_with_a_relative_path_needs_an_absolute_working_directory(tmp_path: Path) -> None:
    (tmp_path / "p.toml").write_text('binary = "/opt/llama-server"\nmodel = "m/q.gguf"\nalias = "q"\nport = 8080\n')
    with pytest.raises(ProfileError, match=r"'model' is 'm/q.gguf', a relative path.*set \[systemd.Service\] "
                                           r"WorkingDirectory= to an absolute directory"):
        load_profile(tmp_path, "p")
    with (tmp_path / "p.toml").open("a") as profile:
        profile.write('[systemd.Service]\nWorkingDirectory = "-/srv/x"\n')
    assert load_profile(tmp_path, "p").model == Path("/srv/x/m/q.gguf")


def test_paths_render_with_the_bytes_the_unit_had(tmp_path: Path) -> None:
    result = imported("[Service]\nExecStart=/opt/llama-server -m /home/ann//models/q.gguf --port 8080\n")
    assert "/home/ann//models/q.gguf" in rendered(result, tmp_path)
