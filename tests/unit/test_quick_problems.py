"""What `specd profiles` flags on each profile without running anything (specd.deploy.preflight.quick_problems),
a socket endpoint's own checks (check_socket), and who holds a port (port_holders, over real sockets)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from specd.deploy.preflight import check_socket, port_holders, quick_problems
from specd.errors import PreflightError
from specd.profiles.config import Deployment, ProxyConfig
from specd.profiles.load import Profile, load_profile


def profile(tmp_path: Path, body: str, name: str = "p") -> Profile:
    (tmp_path / f"{name}.toml").write_text(body)
    return load_profile(tmp_path, name)


def deployment(tmp_path: Path, proxy: ProxyConfig | None = None) -> Deployment:
    return Deployment("llama-quick.service", "user", tmp_path, proxy=proxy)


@pytest.fixture
def files(tmp_path: Path) -> Path:
    """A binary, a model, a draft, a key and a models directory that exist."""
    (tmp_path / "llama-server").write_text("#!/bin/sh\n")
    (tmp_path / "llama-server").chmod(0o755)
    for name in ("m.gguf", "d.gguf", "key", "preset.ini"):
        (tmp_path / name).write_text("x")
    (tmp_path / "models").mkdir()
    return tmp_path


def test_a_profile_whose_files_exist_has_no_problem(files: Path) -> None:
    good = profile(files, f'binary = "{files}/llama-server"\nmodel = "{files}/m.gguf"\nalias = "m"\nport = 8080\n'
                          f'api_key_file = "{files}/key"\n[speculative]\ntype = "draft"\n'
                          f'draft_model = "{files}/d.gguf"\n')
    assert quick_problems(deployment(files), good) == []


def test_each_missing_file_is_named_by_its_key(files: Path) -> None:
    bad = profile(files, f'binary = "{files}/gone-server"\nmodel = "{files}/gone.gguf"\nalias = "m"\nport = 8080\n'
                         f'api_key_file = "{files}/no-key"\n[speculative]\ntype = "draft"\n'
                         f'draft_model = "{files}/no-draft.gguf"\n')
    assert quick_problems(deployment(files), bad) == [
        f"{files}/gone-server: no such binary", f"model {files}/gone.gguf: no such file",
        f"speculative.draft_model {files}/no-draft.gguf: no such file", f"api_key_file {files}/no-key: no such file"]


def test_a_router_profiles_preset_and_models_directory_must_exist(files: Path) -> None:
    good = profile(files, f'binary = "{files}/llama-server"\nmodels_dir = "{files}/models"\n'
                          f'models_preset = "{files}/preset.ini"\nport = 8080\n', "router")
    assert quick_problems(deployment(files), good) == []
    bad = profile(files, f'binary = "{files}/llama-server"\nmodels_dir = "{files}/no-models"\n'
                         f'models_preset = "{files}/no.ini"\nport = 8080\n', "router2")
    assert quick_problems(deployment(files), bad) == [f"models_preset {files}/no.ini: no such file",
                                                      f"{files}/no-models: no such directory"]


def test_a_vllm_profile_is_checked_for_its_environment_and_its_model_directory(files: Path) -> None:
    vllm = profile(files, f'engine = "vllm"\nbinary = "{files}/venv/bin/vllm"\nmodel = "{files}/hf"\nalias = "q"\n'
                          "port = 8000\n", "v")
    problems = quick_problems(deployment(files), vllm)
    assert problems[0] == f"{files}/venv/bin/vllm: no such binary: the profile's environment has no vllm"
    assert problems[1].startswith(f"{files}/hf: no such model directory")
    assert len(problems) == 2


def test_a_launcher_profile_is_not_judged_by_its_binary(files: Path) -> None:
    launched = profile(files, f'binary = "{files}/gone-server"\nlauncher = ["/usr/bin/env"]\nmodel = "{files}/g.gguf"\n'
                              'alias = "m"\nport = 8080\n', "l")
    assert quick_problems(deployment(files), launched) == []


@pytest.mark.parametrize(("listen_host", "profile_host", "clash"), [
    ("127.0.0.1", "127.0.0.1", True),
    ("0.0.0.0", "127.0.0.1", True),  # the proxy listens on every address
    ("::", "127.0.0.1", True),
    ("127.0.0.1", "0.0.0.0", True),  # the server does
    ("127.0.0.1", "::", True),
    ("127.0.0.1", "127.0.0.2", False),  # two addresses, one port each: both can listen
])
def test_a_profile_on_the_proxys_listen_port_is_flagged_where_both_would_listen(
        files: Path, listen_host: str, profile_host: str, clash: bool) -> None:
    server = profile(files, f'binary = "{files}/llama-server"\nmodel = "{files}/m.gguf"\nalias = "m"\nport = 9000\n'
                            f'host = "{profile_host}"\n')
    proxy = ProxyConfig(listen_host=listen_host, listen_port=9000)
    flagged = "port 9000 is the proxy's listen port ([proxy] listen); give the profile another"
    assert (flagged in quick_problems(deployment(files, proxy), server)) is clash
    assert quick_problems(deployment(files, ProxyConfig(listen_host=listen_host, listen_port=9001)), server) == []
    assert quick_problems(deployment(files), server) == []


def test_a_socket_profile_needs_its_directory_and_no_proxy(files: Path) -> None:
    here = profile(files, f'binary = "{files}/llama-server"\nmodel = "{files}/m.gguf"\nalias = "m"\n'
                          f'host = "{files}/models/l.sock"\n', "s")
    check_socket(deployment(files), here)  # the directory exists, no proxy: fine
    assert quick_problems(deployment(files), here) == []
    nowhere = profile(files, f'binary = "{files}/llama-server"\nmodel = "{files}/m.gguf"\nalias = "m"\n'
                             f'host = "{files}/absent/l.sock"\n', "s2")
    with pytest.raises(PreflightError, match=f"the socket's directory {files}/absent does not exist"):
        check_socket(deployment(files), nowhere)
    with pytest.raises(PreflightError, match="is a Unix socket, and the deployment has a"):
        check_socket(deployment(files, ProxyConfig()), here)
    tcp = profile(files, f'binary = "{files}/llama-server"\nmodel = "{files}/m.gguf"\nalias = "m"\nport = 8080\n', "t")
    check_socket(deployment(files, ProxyConfig()), tcp)  # not a socket: nothing to check


def test_the_holders_of_a_port_are_the_processes_listening_on_it() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    try:
        assert port_holders(port) == {os.getpid()}
        client = socket.create_connection(("127.0.0.1", port))  # a connection on the port is no holder
        accepted, _ = listener.accept()
        listener.close()
        assert port_holders(port) == set()
        client.close()
        accepted.close()
    finally:
        listener.close()
