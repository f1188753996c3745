"""The README's TOML examples work as written: configs load, profiles validate and render against
the llama-server specd ships (every flag they produce is in its --help), and the example config's
proxy does not listen on the example profile's port."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specd.profiles.config import load_config
from specd.profiles.flags import binary_flags
from specd.profiles.load import load_profile, read_source
from specd.unit.render import build_argv
from tests.conftest import LLAMA_SERVER, REPO, TINY_MODEL, require_real_server

BLOCKS = re.findall(r"```toml\n(.*?)```", (REPO / "README.md").read_text(), re.DOTALL)


def _dedent(block: str) -> str:
    lines = block.splitlines()
    indent = min((len(line) - len(line.lstrip()) for line in lines if line.strip()), default=0)
    return "\n".join(line[indent:] for line in lines) + "\n"


CONFIGS = [_dedent(b) for b in BLOCKS if re.search(r"^\s*(unit|\[proxy\]|\[daemon\]|\[notify\])", b, re.MULTILINE)]
PROFILES = [_dedent(b) for b in BLOCKS if _dedent(b) not in CONFIGS]


def test_the_readme_has_examples_of_both_kinds() -> None:
    assert len(CONFIGS) >= 2 and len(PROFILES) >= 2


@pytest.mark.parametrize("text", CONFIGS)
def test_readme_configs_load(tmp_path: Path, text: str) -> None:
    path = tmp_path / "specd.toml"
    path.write_text(text if "unit" in text else 'unit = "llama-server.service"\nprofiles_dir = "p"\n' + text)
    load_config(path)


@pytest.mark.parametrize("text", PROFILES)
def test_readme_profiles_render_with_the_shipped_llama_server(tmp_path: Path, text: str) -> None:
    require_real_server()
    # The examples inherit a base they do not show ("base", "current"): one with the shipped binary.
    for parent in ("base", "current"):
        (tmp_path / f"{parent}.toml").write_text(
            f'binary = "{LLAMA_SERVER}"\nmodel = "{TINY_MODEL}"\nalias = "example"\nport = 8081\n')
    path = tmp_path / "example.toml"
    path.write_text(text)
    read_source(path)
    profile = load_profile(tmp_path, "example")
    # Paths to models and binaries of the example box do not exist here; the flags must.
    flags = binary_flags(LLAMA_SERVER)
    argv = build_argv(profile, flags)
    assert argv[0] == str(profile.binary) and "--port" in argv


def test_the_example_proxy_and_profile_do_not_share_a_port() -> None:
    config_ports = {int(m) for c in CONFIGS for m in re.findall(r'listen = "[^"]*:(\d+)"', c)}
    profile_ports = {int(m) for p in PROFILES for m in re.findall(r"^port = (\d+)", p, re.MULTILINE)}
    assert config_ports and profile_ports and not config_ports & profile_ports
