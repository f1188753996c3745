"""`specd import`: a hand-written unit with real llama-server flags becomes a profile that
renders back to the same command line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from specd.deploy.preflight import run_preflight
from specd.profiles.config import Deployment
from specd.profiles.load import load_profile
from specd.unit.importer import import_unit
from tests.conftest import LLAMA_SERVER, TINY_MODEL

pytestmark = pytest.mark.usefixtures("real_server")

HAND_WRITTEN = f"""\
[Unit]
Description=my llama
[Service]
Environment=LLAMA_ARG_THREADS_HTTP=4
Environment="CUDA_VISIBLE_DEVICES=0"
ExecStart={LLAMA_SERVER} \\
    -m {TINY_MODEL} --alias "tiny,tiny-alt" \\
    --host 127.0.0.1 --port 8099 -c 2048 -fa on -ctk q8_0 -ctv q8_0 -np 1 -t 2 \\
    --spec-type ngram-simple --spec-draft-n-max 12 --jinja --no-perf --temp 0.6
Restart=always
[Install]
WantedBy=default.target
"""


def test_import_maps_flags_to_typed_keys_and_round_trips(tmp_path: Path) -> None:
    unit = tmp_path / "llama-server.service"
    unit.write_text(HAND_WRITTEN)
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    path = import_unit(unit, profiles, "mine")
    profile = load_profile(profiles, "mine")
    assert profile.model == TINY_MODEL and profile.alias == "tiny,tiny-alt" and profile.port == 8099
    assert (profile.ctx_size, profile.flash_attn, profile.cache_type_k, profile.parallel, profile.threads) == (
        2048, "on", "q8_0", 1, 2)
    assert profile.speculative.type == "ngram-simple" and profile.speculative.draft_n_max == 12
    assert profile.jinja and profile.args == ("--no-perf", "--temp", "0.6")
    assert dict(profile.env) == {"LLAMA_ARG_THREADS_HTTP": "4", "CUDA_VISIBLE_DEVICES": "0"}
    assert path.read_text().startswith("# Imported by `specd import`")

    pre = run_preflight(Deployment(unit="x.service", scope="user", profiles_dir=profiles), "mine")
    assert "--no-perf" in pre.argv and pre.argv[pre.argv.index("--spec-type") + 1] == "ngram-simple"


def test_import_refuses_to_overwrite_and_bad_units(tmp_path: Path) -> None:
    from specd.errors import UsageError

    unit = tmp_path / "u.service"
    unit.write_text(HAND_WRITTEN)
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    import_unit(unit, profiles, "mine")
    with pytest.raises(UsageError, match="exists"):
        import_unit(unit, profiles, "mine")
    empty = tmp_path / "empty.service"
    empty.write_text("[Service]\nType=simple\n")
    with pytest.raises(UsageError, match="no ExecStart"):
        import_unit(empty, profiles, "other")
    assert not (profiles / "other.toml").exists()
    shutil.rmtree(profiles)
