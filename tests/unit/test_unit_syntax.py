"""Units read as systemd reads them, and imported as their owner runs them.

The fixtures are shapes taken from real units (specifiers, EnvironmentFile, wrappers, comment lines
inside continuations); the property test at the end checks the parser against real systemd's own
parse in tests/system/test_unit_roundtrip.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specd.errors import UsageError
from specd.unit.importer import profile_from_unit
from specd.unit.locate import resolve_source
from specd.unit.parse import read_unit
from specd.unit.specifiers import UnitContext
from specd.unit.syntax import expand_variables, logical_lines, split_words

CTX = UnitContext("llama-server@qwen.service", "user", home="/home/ann", user="ann", uid=1000)


def argv_of(text: str, context: UnitContext = CTX) -> list[str]:
    return read_unit(text, "test.service", context).command.argv


def test_comment_lines_inside_a_continuation_are_skipped() -> None:
    text = "[Service]\nExecStart=/opt/llama-server \\\n  -m /m.gguf \\\n#  --old-flag \\\n  --port 9000\n"
    assert argv_of(text) == ["/opt/llama-server", "-m", "/m.gguf", "--port", "9000"]


def test_specifiers_resolve_for_the_unit_and_its_instance() -> None:
    text = ("[Service]\nExecStart=%h/llama.cpp/llama-server -m %h/models/%i.gguf --alias %i "
            "--slot-save-path %t/x 100%%\n")
    assert argv_of(text) == ["/home/ann/llama.cpp/llama-server", "-m", "/home/ann/models/qwen.gguf", "--alias",
                             "qwen", "--slot-save-path", argv_of("[Service]\nExecStart=%t/x\n")[0], "100%"]
    system = UnitContext.for_unit("llama.service", "system")
    assert argv_of("[Service]\nExecStart=%h/bin/llama-server -m %E/m.gguf\n", system) == [
        "/root/bin/llama-server", "-m", "/etc/m.gguf"]


def test_an_unknown_specifier_is_refused_naming_the_line() -> None:
    with pytest.raises(UsageError, match=r"line 2: %Q in '/m/%Q.gguf' is not a systemd specifier"):
        argv_of("[Service]\nExecStart=/opt/llama-server -m /m/%Q.gguf\n")


def test_variables_expand_as_systemd_does() -> None:
    text = ('[Service]\nEnvironment="ARGS=-c 4096 -ngl 99" MODEL=/m/q.gguf\n'
            "ExecStart=/opt/llama-server -m ${MODEL} $ARGS --alias x${MODEL} $$HOME\n")
    assert argv_of(text) == ["/opt/llama-server", "-m", "/m/q.gguf", "-c", "4096", "-ngl", "99", "--alias",
                             "x/m/q.gguf", "$HOME"]
    assert expand_variables(["${ARGS}"], {"ARGS": "a b"}) == ["a b"]  # ${VAR} never splits
    assert expand_variables(["$NOPE", "x"], {}) == ["x"]  # unset bare $VAR vanishes


def test_environment_files_are_read_and_optional_ones_may_be_missing(tmp_path: Path) -> None:
    env = tmp_path / "llama.env"
    env.write_text('# models\nMODEL="/m/with space.gguf"\nexport PORT=8123\nFLAGS=\'-fa on\'\n')
    text = (f"[Service]\nEnvironmentFile={env}\nEnvironmentFile=-{tmp_path}/absent.env\n"
            "ExecStart=/opt/llama-server -m ${MODEL} --port ${PORT} $FLAGS\n")
    parsed = read_unit(text, "test.service", CTX)
    assert parsed.command.argv == ["/opt/llama-server", "-m", "/m/with space.gguf", "--port", "8123", "-fa", "on"]
    assert any("from EnvironmentFile=" in note for note in parsed.notes)
    assert any("absent.env (optional)" in note for note in parsed.notes)
    with pytest.raises(UsageError, match="EnvironmentFile=.*cannot be read"):
        read_unit(f"[Service]\nEnvironmentFile={tmp_path}/absent.env\nExecStart=/opt/llama-server\n", "t", CTX)


def test_c_escapes_work_in_both_quote_kinds_and_quotes_group() -> None:
    assert split_words(r"""a "b c" 'd\te' f\x41 "g\"h" \s""", "t") == ["a", "b c", "d\te", "fA", 'g"h', " "]
    with pytest.raises(UsageError, match="unbalanced"):
        split_words('"open', "t")


def test_a_non_utf8_unit_gets_a_clear_error(tmp_path: Path) -> None:
    unit = tmp_path / "latin1.service"
    unit.write_bytes("[Unit]\nDescription=caf\xe9\n".encode("latin-1"))
    from specd.unit.syntax import read_unit_text

    with pytest.raises(UsageError, match=r"latin1.service line 2: not UTF-8"):
        read_unit_text(unit)


def test_logical_lines_keep_the_line_each_starts_on() -> None:
    lines = logical_lines("[Service]\n\nExecStart=/a \\\n  b\nUser=x\n")
    assert [(line.line, line.text) for line in lines] == [(1, "[Service]"), (3, "ExecStart=/a b"), (5, "User=x")]


# --- import: wrappers, defaults, values the binary takes --------------------------------------------------------


def imported(exec_start: str, extra: str = "") -> dict[str, object]:
    return profile_from_unit(f"[Service]\n{extra}ExecStart={exec_start}\nUser=llama\n", "t.service", "d", CTX).data


def test_bash_c_and_env_wrappers_import_the_inner_command() -> None:
    data = imported("/bin/bash -lc 'cd /srv && exec /opt/llama-server -m /m.gguf -c 2048 --port 9001'")
    assert data["binary"] == "/opt/llama-server" and data["ctx_size"] == 2048 and data["port"] == 9001
    data = imported("/usr/bin/env CUDA_VISIBLE_DEVICES=1 /opt/llama-server -m /m.gguf")
    assert data["binary"] == "/opt/llama-server" and data["env"] == {"CUDA_VISIBLE_DEVICES": "1"}
    data = imported("/bin/sh -c 'exec /opt/llama-server -m ${MODEL} $ARGS'",
                    'Environment=MODEL=/m.gguf "ARGS=-ngl 99 --jinja"\n')
    assert data["model"] == "/m.gguf" and data["n_gpu_layers"] == 99 and data["jinja"] is True


@pytest.mark.parametrize(("exec_start", "says"), [
    ("/usr/bin/docker run --rm -p 8080:8080 ghcr.io/ggml-org/llama.cpp:server -m /m.gguf", "in a container"),
    ("/usr/local/bin/start-llama.sh", "wrapper script specd cannot see into"),
    ("/bin/bash /usr/local/bin/start-llama.sh", "with the script /usr/local/bin/start-llama.sh, not -c"),
    # daruoktab/document-agent's shape: the script's own arguments (-c 16384 among them) are not bash's options
    ("/bin/bash /srv/logged-exec.sh /srv/log /usr/local/bin/llama-server -m q.gguf -c 16384",
     "with the script /srv/logged-exec.sh, not -c"),
    ("/bin/bash -c '/opt/llama-server -m $UNSET'", "neither the unit nor the script sets"),
])
def test_wrappers_specd_cannot_carry_are_refused_naming_them(exec_start: str, says: str) -> None:
    with pytest.raises(UsageError, match=says):
        imported(exec_start)


def test_missing_host_port_and_alias_are_what_llama_server_does_without_them_and_say_so() -> None:
    result = profile_from_unit("[Service]\nExecStart=/opt/llama-server -m /models/qwen-Q4.gguf\n", "t", "d", CTX)
    # With no --alias, llama-server serves the model path as given (not the file name): clients keep that id.
    assert (result.data["host"], result.data["port"], result.data["alias"]) == (
        "127.0.0.1", 8080, "/models/qwen-Q4.gguf")
    assert result.data["implicit"] == ["alias", "host", "port"]
    said = " ".join(row.became for row in result.rows)
    assert "llama-server's default" in said and "the id llama-server reports in /v1/models with no --alias" in said


def test_classic_draft_flags_become_a_draft_profile() -> None:
    data = imported("/opt/llama-server -m /m.gguf -md /d.gguf --draft-max 16 -ngld 99")
    assert data["speculative"] == {"draft_model": "/d.gguf", "draft_n_max": 16, "draft_ngl": 99, "type": "draft"}


def test_values_the_binary_admits_become_typed_keys() -> None:
    data = imported("/opt/llama-server -m /m.gguf -ngl all -fa 1 -ctk turbo4 --spec-type draft-dflash,ngram-mod")
    assert (data["n_gpu_layers"], data["flash_attn"], data["cache_type_k"]) == ("all", "1", "turbo4")
    assert data["speculative"] == {"type": "draft-dflash,ngram-mod"}


def test_a_bare_flag_that_usually_takes_a_value_does_not_swallow_the_next_flag() -> None:
    # An old build's bare --flash-attn, with a binary that cannot be asked here: it stays as written, alone;
    # the flag after it is read as the flag it is.
    data = imported("/opt/llama-server -m /m.gguf --flash-attn --metrics -c 4096")
    assert data["args"] == ["--flash-attn"] and data["ctx_size"] == 4096 and data["metrics"] is True


def test_the_rest_of_the_unit_is_carried_as_written() -> None:
    result = profile_from_unit("[Unit]\nAfter=network-online.target\n[Service]\n"
                               "ExecStart=/opt/llama-server -m /m.gguf\n"
                               "User=llama\nLimitMEMLOCK=infinity\nExecStartPre=/bin/rm -f %t/x\n"
                               "ExecStartPre=/bin/true\n"
                               "[X-Extra]\nKey=v\n", "t", "d", CTX)
    assert result.data["systemd"] == {"Unit": {"After": "network-online.target"},
                                      "Service": {"User": "llama", "LimitMEMLOCK": "infinity",
                                                  "ExecStartPre": ["/bin/rm -f %t/x", "/bin/true"]}}
    dropped = [row.source for row in result.rows if row.became.startswith("NOT carried")]
    assert dropped == ["Key=v ([X-Extra] line 10)"]
    said = [row.became for row in result.rows if row.source.startswith("User=")]
    assert "a user unit cannot change user" in said[0]


def test_from_takes_an_installed_template_instance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    unit_dir = tmp_path / "systemd" / "user"
    unit_dir.mkdir(parents=True)
    (unit_dir / "llama-server@.service").write_text("[Service]\nExecStart=/opt/llama-server -m /m/%i.gguf\n")
    assert resolve_source("llama-server@qwen.service", "user") == unit_dir / "llama-server@.service"
    with pytest.raises(UsageError, match="no unit file nosuch.service"):
        resolve_source("nosuch.service", "user")


def test_carried_directives_replace_the_templates_and_add_the_rest() -> None:
    from specd.profiles.load import Directive
    from specd.unit.render import carry_directives

    template = ("[Unit]\nDescription=x\n\n[Service]\nType=simple\nExecStart=/bin/a\nRestart=on-failure\n\n"
                "[Install]\nWantedBy=default.target\n")
    text = carry_directives(template, (Directive("Service", "Restart", "always"), Directive("Service", "User", "llama"),
                                       Directive("Service", "ExecStartPre", "/bin/true"),
                                       Directive("Service", "ExecStartPre", "/bin/false")))
    service = text.split("[Service]\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert service == ["Type=simple", "ExecStart=/bin/a", "Restart=always", "User=llama", "ExecStartPre=/bin/true",
                       "ExecStartPre=/bin/false"]
    assert (text.startswith("[Unit]\nDescription=x\n\n[Service]")
            and text.endswith("[Install]\nWantedBy=default.target\n"))


def test_several_environment_files_and_globs_are_read_in_order_later_ones_winning(tmp_path: Path) -> None:
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "10-model.env").write_text("MODEL=/m/a.gguf\nCTX=4096\n")
    (tmp_path / "conf.d" / "20-override.env").write_text("CTX=8192\n")
    (tmp_path / "last.env").write_text("FLAGS=-fa on\n")
    text = (f"[Service]\nEnvironmentFile={tmp_path}/conf.d/*.env\nEnvironmentFile={tmp_path}/last.env\n"
            f"EnvironmentFile=-{tmp_path}/none/*.env\nExecStart=/opt/llama-server -m ${{MODEL}} -c ${{CTX}} $FLAGS\n")
    assert argv_of(text) == ["/opt/llama-server", "-m", "/m/a.gguf", "-c", "8192", "-fa", "on"]
    with pytest.raises(UsageError, match=r"EnvironmentFile=.*/none/\*.env cannot be read"):
        argv_of(f"[Service]\nEnvironmentFile={tmp_path}/none/*.env\nExecStart=/opt/llama-server\n")


def test_import_says_what_each_specifier_resolved_to() -> None:
    result = profile_from_unit("[Service]\nExecStart=%h/bin/llama-server -m %h/models/%i.gguf --port 9000 -a x%%\n",
                               "t.service", "d", CTX)
    said = [row.became for row in result.rows if row.source == "unit"]
    assert ("%h is '/home/ann': the home directory of the manager's user (llama-server@qwen.service, "
            "user manager)") in said
    assert "%i is 'qwen': the unit's instance (llama-server@qwen.service, user manager)" in said
    assert not any(line.startswith("%%") for line in said)


def test_a_line_dropped_after_a_broken_continuation_is_reported_with_its_line() -> None:
    # terR0Q/ai_runners' shape: the second line lacks its trailing backslash, so systemd drops the third.
    text = "[Service]\nExecStart=/opt/llama-server \\\n  -m /m.gguf\n  --port 11434 --threads 6\n"
    result = profile_from_unit(text, "t.service", "d", CTX)
    assert result.data["port"] == 8080 and "threads" not in result.data  # what systemd runs
    said = [row.became for row in result.rows if row.source == "unit"]
    assert any(line.startswith("t.service line 4: '--port 11434 --threads 6' is neither") and "trailing" in line
               for line in said), said


def test_a_script_with_arguments_that_are_not_llama_servers_is_a_wrapper_not_a_router(tmp_path: Path) -> None:
    # srgtuszy/rog-ally-ai's shape: `%h/gpu-setup/stack.sh daemon`. Not llama-server, and never run to ask.
    script = tmp_path / "stack.sh"
    ran = tmp_path / "ran"
    script.write_text(f"#!/bin/sh\ntouch {ran}\n")
    script.chmod(0o755)
    with pytest.raises(UsageError, match=r"stack.sh daemon: neither the program's name nor its arguments"):
        imported(f"{script} daemon")
    assert not ran.exists()
    data = imported("/opt/bitnet/bitnet-server -m /m.gguf --port 9000")  # a renamed build: its flags say so
    assert data["binary"] == "/opt/bitnet/bitnet-server" and data["port"] == 9000
