"""`bash -c` scripts in ExecStart=: the llama-server command they end in, found without running them.

The shapes are those of real units (tests/corpus: lordachoo's conditional ARGS, chrisspen's
`source` and `$(... && echo --jinja || true)`); the property test at the end compares the reading
with what the real bash execs for generated scripts.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specd.errors import UsageError
from specd.unit.shell import script_command


def no_files(path: str) -> str | None:
    return None


def command(script: str, env: dict[str, str] | None = None) -> list[str]:
    return script_command(script, env or {}, "t.service", read_source=no_files).argv


def test_conditional_flags_are_followed_as_the_shell_follows_them() -> None:
    script = ('ARGS="-m /m.gguf -c 4096"; [ "$NO_MMAP" = "true" ] && ARGS="$ARGS --no-mmap"; '
              '[ "$FA" = "true" ] && ARGS="$ARGS --flash-attn on"; [ -n "$EXTRA" ] && ARGS="$ARGS $EXTRA"; '
              'exec /opt/llama-server $ARGS')
    assert command(script, {"NO_MMAP": "true", "FA": "false", "EXTRA": ""}) == [
        "/opt/llama-server", "-m", "/m.gguf", "-c", "4096", "--no-mmap"]
    assert command(script, {"NO_MMAP": "no", "FA": "true", "EXTRA": "--jinja -np 2"}) == [
        "/opt/llama-server", "-m", "/m.gguf", "-c", "4096", "--flash-attn", "on", "--jinja", "-np", "2"]


def test_command_substitution_of_echo_and_if_statements() -> None:
    script = ('if [ "$MODE" = fast ]; then N=8; elif [ "$MODE" = slow ]; then N=1; else N=4; fi; '
              'exec /opt/llama-server -m "/m dir/x.gguf" -np "$N" $([ "$JINJA" = "true" ] && echo "--jinja" || true)')
    assert command(script, {"MODE": "slow", "JINJA": "true"}) == [
        "/opt/llama-server", "-m", "/m dir/x.gguf", "-np", "1", "--jinja"]
    assert command(script, {"MODE": "other", "JINJA": "no"}) == ["/opt/llama-server", "-m", "/m dir/x.gguf",
                                                                "-np", "4"]


def test_parameter_defaults_quotes_and_escapes() -> None:
    script = "exec /opt/llama-server -m ${MODEL:-/d.gguf} --alias \"a\\$b\" 'c d' e\\ f ${PORT:+--port} ${PORT:+$PORT}"
    assert command(script, {"PORT": "9000"}) == ["/opt/llama-server", "-m", "/d.gguf", "--alias", "a$b", "c d",
                                                 "e f", "--port", "9000"]
    assert command(script, {"MODEL": "/x.gguf"}) == ["/opt/llama-server", "-m", "/x.gguf", "--alias", "a$b", "c d",
                                                     "e f"]


def test_a_sourced_file_of_assignments_is_read_and_exports_reach_the_server(tmp_path: Path) -> None:
    settings_file = tmp_path / "llama.env"
    settings_file.write_text('# settings\nMODEL="/m/q.gguf"\nexport CUDA_VISIBLE_DEVICES=1\n')
    found = script_command(f"source {settings_file}; exec /opt/llama-server -m $MODEL", {}, "t.service",
                           read_source=lambda p: Path(p).read_text() if Path(p).exists() else None)
    assert found.argv == ["/opt/llama-server", "-m", "/m/q.gguf"]
    assert found.exported == {"CUDA_VISIBLE_DEVICES": "1"}
    missing = script_command("source /nonexistent.env; exec /opt/llama-server -m /m.gguf", {}, "t",
                             read_source=no_files)
    assert missing.argv[-1] == "/m.gguf" and any("does not exist here" in note for note in missing.notes)


@pytest.mark.parametrize(("script", "says"), [
    ("[ -f /m.gguf ] && exec /opt/llama-server -m /m.gguf", "tests a file"),
    ("nvidia-smi -L; exec /opt/llama-server -m /m.gguf", "ExecStartPre="),
    ("/opt/llama-server -m /m.gguf | tee /tmp/log", "pipeline"),
    ("exec /opt/llama-server -m /models/*.gguf", "glob pattern"),
    ("exec /opt/llama-server -m $MODEL", "neither the unit nor the script sets"),
    ("exec /opt/llama-server -c $((1024*4))", "arithmetic expansion"),
    ("/opt/llama-server -m /m.gguf; echo stopped", "without `exec`"),
    ("exec /opt/llama-server -m \"/m.gguf", "does not parse"),
    ("N=$(nproc); exec /opt/llama-server -t $N", "inside $(...)"),
])
def test_what_depends_on_the_box_at_start_is_refused_naming_it(script: str, says: str) -> None:
    with pytest.raises(UsageError, match=r"t\.service: the shell script") as caught:
        command(script)
    assert says in caught.value.message


# --- the real bash as the judge ---------------------------------------------------------------------------------

_RECORDER = 'exec() { printf "%s\\0" "$@" > "$RECORD"; builtin exit 0; }\n'
_values = st.sampled_from(["", "true", "false", "1", "8", "a b", "/m/x.gguf", "-fa on", "x'y", 'q"r', "$HOME"])
_names = st.sampled_from(["A", "B", "C"])


@st.composite
def _word(draw: st.DrawFn) -> str:
    name = draw(_names)
    kind = draw(st.sampled_from(["plain", "var", "quoted-var", "braced", "default", "single", "escaped", "subst"]))
    return {"plain": draw(st.sampled_from(["--port", "-c", "4096", "x=y"])), "var": f"${name}",
            "quoted-var": f'"${name}"', "braced": f"${{{name}}}", "default": f'"${{{name}:-d e}}"',
            "single": "'s $A t'", "escaped": "a\\ b\\$c",
            "subst": f'$([ "${name}" = true ] && echo --jinja || true)'}[kind]


@st.composite
def _statement(draw: st.DrawFn) -> str:
    name = draw(_names)
    value = draw(_values).replace("\\", "").replace("'", "'\\''")
    kind = draw(st.sampled_from(["assign", "append", "cond", "if", "test-n"]))
    other = draw(_names)
    return {"assign": f"{name}='{value}'", "append": f'{name}="${name} {draw(_word())}"',
            "cond": f'[ "${other}" {draw(st.sampled_from(["=", "!="]))} "true" ] && {name}=x || {name}=y',
            "if": f'if [ -z "${other}" ]; then {name}=empty; else {name}="${other}-set"; fi',
            "test-n": f'[ -n "${other}" ] && {name}="$A$B"'}[kind]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(statements=st.lists(_statement(), max_size=4), words=st.lists(_word(), max_size=5),
       environment=st.dictionaries(_names, _values, max_size=3))
def test_the_command_found_is_what_the_real_bash_execs(tmp_path: Path, statements: list[str], words: list[str],
                                                       environment: dict[str, str]) -> None:
    base = {name: "" for name in ("A", "B", "C")}
    script = "; ".join([*statements, "exec /opt/llama-server " + " ".join(words)])
    record = tmp_path / "record"
    record.unlink(missing_ok=True)
    empty = tmp_path / "empty"
    empty.mkdir(exist_ok=True)
    subprocess.run(["/bin/bash", "-c", _RECORDER + script], cwd=empty, capture_output=True, timeout=10, check=True,
                   env={**base, **environment, "HOME": "/home/u", "PATH": str(empty), "RECORD": str(record)})
    by_bash = record.read_bytes().decode().split("\0")[:-1]
    found = script_command(script, {**base, **environment, "HOME": "/home/u"}, "t", read_source=no_files)
    assert found.argv == by_bash, script


def test_a_relative_program_after_cd_is_made_absolute() -> None:
    assert command("cd /opt/llama.cpp/build/bin && exec ./llama-server -m /m.gguf") == [
        "/opt/llama.cpp/build/bin/llama-server", "-m", "/m.gguf"]
    assert command("cd /srv && exec /opt/llama-server -m /m.gguf")[0] == "/opt/llama-server"
