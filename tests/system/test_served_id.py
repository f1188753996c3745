"""Clients see the same id after `specd import`: the real llama-server says which id it serves.

Without --alias the pinned llama-server serves the model path as given (not its file name), or the
-hf repo as given (`user/repo:quant`). Both specd's rule (keys.reported_model_id, used by import,
render and the gate) and the corpus test's own rule (server_argv.served_id) are checked against
the binary's /v1/models here; then a hand-written unit with no --alias is imported and switched to
for real: the gate passes on that id, the rendered unit has no --alias, and /v1/models lists the
same id as the original unit served.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specd.profiles.keys import reported_model_id
from tests.conftest import LLAMA_SERVER, TINY_MODEL, Box
from tests.system.served_rig import hub_cache, listed_ids, running_server
from tests.system.server_argv import flag_pairs, read_aliases, served_id

pytestmark = [pytest.mark.usefixtures("real_server"), pytest.mark.llama]


def test_without_alias_llama_server_serves_the_model_path_as_given(tmp_path: Path) -> None:
    # A path as a unit may write it: a doubled slash and a symlinked folder, which the file name alone
    # (what specd assumed before issue 34) and a resolved path would both get wrong.
    (tmp_path / "models").symlink_to(TINY_MODEL.parent)
    given = f"{tmp_path}/models//{TINY_MODEL.name}"
    argv = ["-m", given]
    with running_server(argv) as url:
        ids = listed_ids(url)
    assert ids == [given]
    assert reported_model_id(given, None) == given
    assert served_id(flag_pairs(tuple(argv), read_aliases(LLAMA_SERVER)), {}) == given


def test_without_alias_llama_server_serves_the_hf_repo_as_given_and_an_alias_wins(tmp_path: Path) -> None:
    cache = hub_cache(tmp_path / "hub", "specd/tiny", TINY_MODEL)
    argv = ["-hf", "specd/tiny:Q4_K_M", "--offline"]
    with running_server(argv, {"LLAMA_CACHE": str(cache)}) as url:
        assert listed_ids(url) == ["specd/tiny:Q4_K_M"]
    assert reported_model_id(None, "specd/tiny:Q4_K_M") == "specd/tiny:Q4_K_M"
    assert served_id(flag_pairs(tuple(argv), read_aliases(LLAMA_SERVER)), {}) == "specd/tiny:Q4_K_M"
    with running_server(["-m", str(TINY_MODEL), "--alias", "first,second"]) as url:
        assert listed_ids(url) == ["first"]


@pytest.mark.systemd
def test_an_imported_unit_without_alias_keeps_its_id_through_a_real_switch(box: Box, tmp_path: Path) -> None:
    unit = tmp_path / "llama-server.service"
    unit.write_text(f"[Service]\nExecStart={LLAMA_SERVER} -m {TINY_MODEL} --port {box.port} -c 512 -t 1\n"
                    "Restart=on-failure\n")
    with running_server(["-m", str(TINY_MODEL)]) as url:  # what the hand-written unit serves (same argv)
        before = listed_ids(url)
    imported = box.specd("import", "mine", "--from", str(unit), "--json")
    assert imported.returncode == 0, imported.stderr
    profile = (box.profiles_dir / "mine.toml").read_text()
    assert f'alias = "{TINY_MODEL}"' in profile and 'implicit = ["alias", "host"]' in profile
    assert json.loads(imported.stdout)["flags_checked"] is True  # the real binary answered --help
    box.edit_profile("mine", health_timeout_s=60, stability_s=1)
    switched = box.specd("switch", "mine")
    assert switched.returncode == 0, switched.stdout + switched.stderr
    exec_start = next(line for line in box.unit_path.read_text().splitlines() if line.startswith("ExecStart="))
    assert "--alias" not in exec_start and "--host" not in exec_start
    after = listed_ids(f"http://127.0.0.1:{box.port}")
    assert after == before == [str(TINY_MODEL)]
