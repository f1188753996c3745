"""Fuzzed profile and config files: specd answers with its own error or a valid result — never a
traceback — and a profile that loads always renders a unit whose directives are only the template's."""

from __future__ import annotations

from pathlib import Path

import tomlkit
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specd.errors import SpecdError
from specd.profiles.config import load_config
from specd.profiles.load import PROFILE_SCHEMA, load_profile
from specd.unit.render import render_unit
from tests.conftest import REPO

KEYS = sorted([*PROFILE_SCHEMA.keys, "ctx_sise", "unknown", "speculative", "env"])
SCALARS = st.one_of(st.integers(-10, 100000), st.floats(allow_nan=True), st.booleans(),
                    st.text(max_size=20), st.lists(st.text(max_size=8), max_size=3))
TABLES = st.dictionaries(st.sampled_from(["type", "draft_n_max", "draft_p_min", "draft_model", "X", "A_B"]), SCALARS,
                         max_size=4)
DOCUMENTS = st.dictionaries(st.sampled_from(KEYS), st.one_of(SCALARS, TABLES), max_size=10)
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
TEMPLATE = (REPO / "units" / "llama-server.service.in").read_text()


def _dump(document: dict[str, object]) -> str | None:
    try:
        return tomlkit.dumps(document)
    except (ValueError, TypeError):
        return None


@FUZZ
@given(document=DOCUMENTS)
def test_structured_profiles_never_crash(tmp_path: Path, document: dict[str, object]) -> None:
    text = _dump(document)
    if text is None:
        return
    (tmp_path / "p.toml").write_text(text)
    try:
        profile = load_profile(tmp_path, "p")
    except SpecdError:
        return
    unit = render_unit(profile, [str(profile.binary), *profile.args], scope="user", template=TEMPLATE)
    assert unit.count("ExecStart=") == 1 and unit.count("[Service]") == 1


@FUZZ
@given(text=st.text(max_size=300))
def test_arbitrary_profile_text_never_crashes(tmp_path: Path, text: str) -> None:
    (tmp_path / "p.toml").write_text(text)
    try:
        load_profile(tmp_path, "p")
    except SpecdError:
        pass


@FUZZ
@given(document=st.dictionaries(
    st.sampled_from(["unit", "scope", "profiles_dir", "backups_keep", "proxy", "daemon", "tuner", "deployment", "x"]),
    st.one_of(SCALARS, st.dictionaries(st.sampled_from(["listen", "margin", "cron", "n", "unit"]), SCALARS,
                                       max_size=3)), max_size=6))
def test_config_files_never_crash(tmp_path: Path, document: dict[str, object]) -> None:
    text = _dump(document)
    if text is None:
        return
    path = tmp_path / "specd.toml"
    path.write_text(text)
    try:
        load_config(path)
    except SpecdError:
        pass
