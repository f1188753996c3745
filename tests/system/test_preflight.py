"""Preflight: everything checked before a switch touches anything."""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

import pytest

from specd.deploy.preflight import check_strict_modes, run_preflight, vram_details
from specd.errors import PreflightError
from specd.gpu.gguf import read_gguf_info
from specd.profiles.config import Deployment
from specd.profiles.flags import parse_help
from tests.conftest import LLAMA_SERVER, REPO, TINY_MODEL
from tests.gguf_factory import write_gguf

pytestmark = pytest.mark.usefixtures("real_server")


@pytest.fixture
def deployment(tmp_path: Path) -> Deployment:
    profiles = tmp_path / "profiles"
    shutil.copytree(REPO / "profiles" / "tiny", profiles)
    return Deployment(unit="x.service", scope="user", profiles_dir=profiles)


def test_tiny_profile_passes(deployment: Deployment) -> None:
    pre = run_preflight(deployment, "ngram-simple")
    assert pre.model_info.architecture == "gemma3"
    assert "--spec-type" in pre.argv and "ExecStart=" in pre.unit_text
    assert any("VRAM" in note for note in pre.notes)


def test_gguf_header_facts(tmp_path: Path) -> None:
    info = read_gguf_info(TINY_MODEL)
    assert info.block_count == 18 and info.head_count_kv == 1 and not info.has_mtp
    assert write_gguf(tmp_path / "m.gguf", nextn_layers=1) and read_gguf_info(tmp_path / "m.gguf").has_mtp


@pytest.mark.parametrize("content", [b"", b"GGML not really", b"GGUF\x03\x00\x00\x00"])
def test_not_gguf_or_truncated_is_refused(tmp_path: Path, content: bytes) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(content)
    with pytest.raises(PreflightError, match=str(bad)):
        read_gguf_info(bad)


def test_mtp_profile_on_a_model_without_mtp_layers_is_refused(deployment: Deployment, tmp_path: Path) -> None:
    (deployment.profiles_dir / "mtp.toml").write_text('inherits = "base"\n[speculative]\ntype = "mtp"\n')
    with pytest.raises(PreflightError, match="has no MTP layers"):
        run_preflight(deployment, "mtp")
    mtp_model = write_gguf(tmp_path / "mtp.gguf", arch="gemma3", nextn_layers=1)
    (deployment.profiles_dir / "mtp.toml").write_text(
        f'inherits = "base"\nmodel = "{mtp_model}"\n[speculative]\ntype = "mtp"\n')
    assert "draft-mtp" in run_preflight(deployment, "mtp").argv


def test_missing_and_non_executable_binary(deployment: Deployment, tmp_path: Path) -> None:
    (deployment.profiles_dir / "gone.toml").write_text('inherits = "base"\nbinary = "/nonexistent/llama-server"\n')
    with pytest.raises(PreflightError, match="no such binary"):
        run_preflight(deployment, "gone")
    plain = tmp_path / "not-exec"
    plain.write_text("#!/bin/sh\n")
    (deployment.profiles_dir / "noexec.toml").write_text(f'inherits = "base"\nbinary = "{plain}"\n')
    with pytest.raises(PreflightError, match="not executable"):
        run_preflight(deployment, "noexec")


def test_missing_draft_model(deployment: Deployment) -> None:
    (deployment.profiles_dir / "d.toml").write_text(
        'inherits = "base"\n[speculative]\ntype = "draft"\ndraft_model = "/nonexistent/d.gguf"\n')
    with pytest.raises(PreflightError, match="/nonexistent/d.gguf: no such model file"):
        run_preflight(deployment, "d")


def test_port_held_by_another_process_is_refused(deployment: Deployment) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        (deployment.profiles_dir / "p.toml").write_text(f'inherits = "base"\nport = {port}\n')
        with pytest.raises(PreflightError, match=f"port {port} is held by .*pid {os.getpid()}"):
            run_preflight(deployment, "p")
        assert run_preflight(deployment, "p", current_main_pid=os.getpid()).profile.port == port


def test_spec_type_spelling_follows_the_binary() -> None:
    older = parse_help("old", "-m,    --model FNAME    model\n--spec-type [none|mtp|ngram-simple]   types\n")
    assert older.spec_type_spelling("mtp", profile_name="p") == "mtp"
    fork = parse_help("bee", "--spec-type none,dflash,ngram-simple      types\n-m, --model FNAME   model\n")
    assert fork.spec_type_spelling("dflash", profile_name="p") == "dflash"
    with pytest.raises(PreflightError, match="accepts dflash, ngram-simple"):
        fork.spec_type_spelling("mtp", profile_name="p")


def test_system_scope_refuses_files_other_users_can_write(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    model = shared / "m.gguf"
    model.write_bytes(b"GGUF")
    os.chmod(shared, 0o777)
    with pytest.raises(PreflightError, match="writable by other users"):
        check_strict_modes((model,))
    os.chmod(shared, 0o755)
    os.chmod(model, 0o666)
    with pytest.raises(PreflightError, match="chmod go-w"):
        check_strict_modes((model,))
    os.chmod(model, 0o644)
    check_strict_modes((model,))
    assert LLAMA_SERVER.exists()


def test_a_split_mode_the_binary_cannot_load_is_refused_before_the_switch(deployment: Deployment) -> None:
    """The pinned CPU build refuses tensor split ("LLAMA_SPLIT_MODE_TENSOR needs >= 1 devices"); specd
    asks the profile's own binary (its log, not a table), names the mode and the binary's words, and
    `specd show --vram` says the same without raising. Row split loads on this build: no refusal."""
    (deployment.profiles_dir / "tensor.toml").write_text('inherits = "autoregressive"\n'
                                                         'args = ["--split-mode", "tensor"]\n')
    with pytest.raises(PreflightError) as refused:
        run_preflight(deployment, "tensor")
    assert refused.value.message.startswith(
        "profile 'tensor': --split-mode tensor: this llama-server cannot load the model with it: "
        "LLAMA_SPLIT_MODE_TENSOR needs >= 1 devices")
    assert refused.value.hint is not None and "--split-mode layer" in refused.value.hint
    lines, fits = vram_details(deployment, "tensor")
    assert not fits and "LLAMA_SPLIT_MODE_TENSOR needs >= 1 devices" in lines[0]
    (deployment.profiles_dir / "row.toml").write_text('inherits = "autoregressive"\n'
                                                      'args = ["--split-mode", "row"]\n')
    assert "--split-mode" in run_preflight(deployment, "row").argv
    lines, fits = vram_details(deployment, "row")
    assert fits and lines[0] == "--split-mode row: the binary loads the model with it"
