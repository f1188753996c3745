"""Rendering: ExecStart quoting proven byte for byte against the real systemd, argv building
checked against the real llama-server's --help."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specd.deploy.systemd import connect_systemd
from specd.errors import PreflightError, ProfileError
from specd.profiles.flags import binary_flags
from specd.profiles.load import load_profile
from specd.unit.render import build_argv, exec_start_line, quote_environment, quote_exec_arg, render_unit
from tests.conftest import LLAMA_SERVER, REPO

SAFE_TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters=[chr(c) for c in range(32)] + ["\x7f"]),
    max_size=24,
)
TRICKY = st.sampled_from(["%", "%%", "%h", "$", "$$", "${HOME}", "$HOME", "\\", "\\n", '"', "'", " ", ";", "",
                          "-", "@", "a b", "%%n$$"])
ARGS = st.lists(st.one_of(SAFE_TEXT, TRICKY, st.lists(TRICKY, max_size=4).map("".join)), max_size=6)


def test_control_characters_never_reach_the_unit_file_raw() -> None:
    # An argument with a newline (an imported unit's `\n` escape) is written as a C escape: no new line,
    # so no injected directive; an Environment= value with one is refused.
    quoted = quote_exec_arg("a\nExecStartPre=/bin/sh")
    assert "\n" not in quoted and quoted == '"a\\x0aExecStartPre=/bin/sh"'
    with pytest.raises(ProfileError, match="control character"):
        quote_environment("X", "1\nUser=root")


@pytest.fixture(scope="module")
def argv_dumper(tmp_path_factory: pytest.TempPathFactory) -> Path:
    script = tmp_path_factory.mktemp("dump") / "argv-dump"
    script.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                      "open(os.environ['ARGV_OUT'], 'w').write(json.dumps(sys.argv[1:]))\n")
    script.chmod(0o755)
    return script


def _through_systemd(manager: Any, dumper: Path, args: list[str]) -> tuple[list[str], list[str]]:
    """Run `dumper *args` as a real unit's ExecStart: the argv the process got, and systemd's own parse."""
    out = dumper.parent / "argv.json"
    out.unlink(missing_ok=True)
    unit = "specd-argv-probe.service"
    manager.unit_dir.mkdir(parents=True, exist_ok=True)
    (manager.unit_dir / unit).write_text(
        f"[Service]\nType=oneshot\n{quote_environment('ARGV_OUT', str(out))}\n"
        f"ExecStart={exec_start_line([str(dumper), *args])}\n"
    )
    systemd = connect_systemd("user")
    systemd.reload()
    parsed = systemd.exec_start_argv(unit)
    subprocess.run(["systemctl", "--user", "start", unit], env=manager.env, check=True, timeout=30)
    received: list[str] = json.loads(out.read_text())
    return received, list(parsed[0][1:])


@pytest.mark.systemd
@pytest.mark.parametrize("value", ["plain", "with space", 'q"uote', "it's", "back\\slash", "100%", "%h", "$HOME",
                                   "${HOME}", "", "tab\there", "ünïcode"])
def test_a_quoted_argument_reaches_the_process_unchanged(systemd_manager, argv_dumper: Path, value: str) -> None:
    received, parsed = _through_systemd(systemd_manager, argv_dumper, ["--alias", value])
    assert received == ["--alias", value]
    assert parsed == ["--alias", value.replace("$", "$$")]  # systemd's parse, before its $ expansion


@pytest.mark.systemd
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=ARGS)
def test_exec_start_reaches_the_process_byte_for_byte(systemd_manager, argv_dumper: Path, args: list[str]) -> None:
    received, parsed = _through_systemd(systemd_manager, argv_dumper, args)
    assert received == args
    assert parsed == [a.replace("$", "$$") for a in args]


@pytest.fixture
def tiny_dir(tmp_path: Path) -> Path:
    import shutil

    shutil.copytree(REPO / "profiles" / "tiny", tmp_path / "tiny")
    return tmp_path / "tiny"


@pytest.mark.usefixtures("real_server")
def test_argv_uses_the_binary_spelling_and_typed_keys(tiny_dir: Path) -> None:
    flags = binary_flags(LLAMA_SERVER)
    argv = build_argv(load_profile(tiny_dir, "draft"), flags)
    assert argv[0] == str(LLAMA_SERVER)
    joined = " ".join(argv)
    assert "--spec-type draft-simple" in joined and "--spec-draft-n-max 8" in joined
    assert "--spec-draft-p-min 0.75" in joined and "--ctx-size 4096" in joined and "--metrics" in argv


@pytest.mark.usefixtures("real_server")
def test_flag_the_binary_lacks_is_refused(tiny_dir: Path) -> None:
    (tiny_dir / "odd.toml").write_text('inherits = "base"\nargs = ["--no-such-flag", "1"]\n')
    with pytest.raises(PreflightError, match="does not accept --no-such-flag"):
        build_argv(load_profile(tiny_dir, "odd"), binary_flags(LLAMA_SERVER))


@pytest.mark.usefixtures("real_server")
def test_args_repeating_a_typed_key_is_refused(tiny_dir: Path) -> None:
    (tiny_dir / "dup.toml").write_text('inherits = "base"\nargs = ["-c", "8192"]\n')
    with pytest.raises(ProfileError, match="repeats -c"):
        build_argv(load_profile(tiny_dir, "dup"), binary_flags(LLAMA_SERVER))


@pytest.mark.usefixtures("real_server")
def test_rendered_unit_carries_only_template_directives(tiny_dir: Path) -> None:
    (tiny_dir / "evil.toml").write_text(
        'inherits = "base"\ndescription = "x"\nargs = ["--alias", "tiny\\" ExecStartPre=/bin/sh -c id #"]\n'
        '[env]\nFOO = "bar\\" ExecStartPre=/bin/true"\n'
    )
    profile = load_profile(tiny_dir, "evil")
    template = (REPO / "units" / "llama-server.service.in").read_text()
    text = render_unit(profile, [str(LLAMA_SERVER), *profile.args], scope="user", template=template)
    plain = render_unit(load_profile(tiny_dir, "autoregressive"), [str(LLAMA_SERVER)], scope="user",
                        template=template)

    def directives(unit_text: str) -> list[str]:
        return [line.split("=", 1)[0] for line in unit_text.splitlines() if line and not line.startswith(("#", "["))]

    assert sorted(directives(text)) == sorted([*directives(plain), "Environment"])
    assert text.count("\n[") == plain.count("\n[")
