"""`specd import`: a hand-written unit with real llama-server flags becomes a profile that
renders back to the same command line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import pytest

from specd.deploy.preflight import run_preflight
from specd.profiles.config import Deployment
from specd.profiles.load import load_profile
from specd.unit.importer import import_unit
from tests.conftest import LLAMA_SERVER, TINY_MODEL, Box

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


@pytest.mark.systemd
@pytest.mark.llama
def test_a_unit_with_no_model_and_llama_arg_settings_switches_as_router_mode_over_the_cache(
        box: Box, tmp_path: Path) -> None:
    """The Arch package's shape (`llama-server $LLAMA_ARGS`, its conf file's `LLAMA_ARGS=""`) with the port
    set by LLAMA_ARG_PORT: llama-server starts in router mode and serves its download cache. Imported,
    then switched to for real: the gate passes on the cache's model, and the port stays a variable."""
    cache = tmp_path / "llama-cache"
    repo = cache / "models--specd--tiny"
    (repo / "snapshots" / ("0" * 40)).mkdir(parents=True)
    (repo / "snapshots" / ("0" * 40) / "tiny-Q4_K_M.gguf").symlink_to(TINY_MODEL)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    conf = tmp_path / "llama.cpp.conf"
    conf.write_text('LLAMA_ARGS=""\n')
    unit = tmp_path / "llama.cpp.service"
    unit.write_text(f"[Service]\nEnvironmentFile={conf}\nEnvironment=LLAMA_CACHE={cache} LLAMA_ARG_PORT={box.port}\n"
                    f"ExecStart={LLAMA_SERVER} $LLAMA_ARGS\nRestart=on-failure\n")
    imported = box.specd("import", "arch", "--from", str(unit), "--json")
    assert imported.returncode == 0, imported.stderr
    rows = {row["source"]: row["became"] for row in json.loads(imported.stdout)["rows"]}
    assert rows["no model (-m, -hf, --models-dir, --models-preset)"].startswith("router = true")
    assert rows[f"LLAMA_ARG_PORT={box.port}"].startswith(f"port = {box.port}")
    box.edit_profile("arch", health_timeout_s=60, stability_s=1)
    switched = box.specd("switch", "arch")
    assert switched.returncode == 0, switched.stdout + switched.stderr
    exec_start = next(line for line in box.unit_path.read_text().splitlines() if line.startswith("ExecStart="))
    assert "--port" not in exec_start and "--model" not in exec_start
    listed = httpx.get(f"http://127.0.0.1:{box.port}/v1/models", timeout=10).json()["data"]
    assert [entry["id"] for entry in listed] == ["specd/tiny:Q4_K_M"]
