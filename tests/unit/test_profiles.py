"""Profile files: validation errors name file, line and key; inheritance; the shipped examples."""

from __future__ import annotations

from pathlib import Path

import pytest

from specd.errors import ProfileError
from specd.profiles.load import list_profiles, load_profile, read_source

REPO = Path(__file__).resolve().parents[2]

GOOD = """\
description = "test"
binary = "/usr/bin/true"
model = "/models/m.gguf"
alias = "m"
port = 8080
ctx_size = 4096

[speculative]
type = "mtp"
draft_n_max = 6
draft_p_min = 0.75

[env]
CUDA_VISIBLE_DEVICES = "0"
"""


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / f"{name}.toml"
    path.write_text(text)
    return path


def error_of(directory: Path, name: str) -> str:
    with pytest.raises(ProfileError) as info:
        load_profile(directory, name)
    return str(info.value)


def test_good_profile_loads_with_types(tmp_path: Path) -> None:
    write(tmp_path, "mtp", GOOD)
    profile = load_profile(tmp_path, "mtp")
    assert profile.speculative.type == "mtp" and profile.speculative.draft_p_min == 0.75
    assert profile.ctx_size == 4096 and profile.env == (("CUDA_VISIBLE_DEVICES", "0"),)
    assert profile.base_url == "http://127.0.0.1:8080"


def test_unknown_key_names_file_line_and_nearest_key(tmp_path: Path) -> None:
    path = write(tmp_path, "p", GOOD.replace("ctx_size = 4096", "ctx_sise = 4096"))
    message = error_of(tmp_path, "p")
    assert f"{path} line 6" in message and "'ctx_sise'" in message and "did you mean 'ctx_size'" in message


def test_unknown_key_in_table_is_prefixed(tmp_path: Path) -> None:
    write(tmp_path, "p", GOOD.replace("draft_n_max = 6", "draft_nmax = 6"))
    message = error_of(tmp_path, "p")
    assert "line 10" in message and "did you mean 'speculative.draft_n_max'" in message


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("port = 8080", 'port = "8080"', "'port' must be an integer"),
        ("port = 8080", "port = 70000", "'port' must be <= 65535"),
        ("draft_p_min = 0.75", "draft_p_min = 1.5", "must be <= 1.0"),
        ('alias = "m"', 'alias = "a b"', "'alias' must be letters"),
        ('binary = "/usr/bin/true"', 'binary = "relative/llama-server"', "'binary' must be an absolute path"),
        ("ctx_size = 4096", 'ctx_size = 4096\nn_gpu_layers = "most"', "'all' or 'auto'"),
        ('description = "test"', 'description = "line\\nExecStartPre=/bin/sh"', "control character"),
        ('CUDA_VISIBLE_DEVICES = "0"', 'CUDA_VISIBLE_DEVICES = "0\\nUser=root"', "control character"),
    ],
)
def test_bad_values_are_refused_with_location(tmp_path: Path, old: str, new: str, expected: str) -> None:
    path = write(tmp_path, "p", GOOD.replace(old, new))
    message = error_of(tmp_path, "p")
    assert expected in message and str(path) in message and " line " in message


def test_toml_syntax_error_has_line(tmp_path: Path) -> None:
    path = write(tmp_path, "p", GOOD + "\nbroken = [\n")
    assert f"{path} line" in error_of(tmp_path, "p") and "TOML syntax error" in error_of(tmp_path, "p")


def test_missing_required_and_missing_file(tmp_path: Path) -> None:
    write(tmp_path, "p", GOOD.replace('alias = "m"\n', ""))
    assert "needs 'alias'" in error_of(tmp_path, "p")
    assert "no such profile file (profiles to switch to there: p)" in error_of(tmp_path, "absent")


def test_a_mistyped_profile_is_told_the_closest_switchable_name_never_the_abstract_base(tmp_path: Path) -> None:
    write(tmp_path, "base", 'abstract = true\nbinary = "/usr/bin/true"\nport = 8080\n')
    for name in ("ngram-mod", "ngram-simple"):
        write(tmp_path, name, f'inherits = "base"\nmodel = "/m/{name}.gguf"\nalias = "m"\n')
    message = error_of(tmp_path, "ngram-mdo")
    assert "did you mean 'ngram-mod'?" in message and "ngram-simple" in message
    assert "base" not in message.split("(", 1)[1], message  # not offered: switching to it is refused


def test_invalid_profile_name_is_refused(tmp_path: Path) -> None:
    assert "not a valid profile name" in error_of(tmp_path, "../etc/passwd")


def test_inherits_merges_tables_and_child_wins(tmp_path: Path) -> None:
    write(tmp_path, "base", GOOD.replace('description = "test"', "abstract = true"))
    write(tmp_path, "child", 'inherits = "base"\nport = 9000\n[speculative]\ntype = "ngram-simple"\n')
    child = load_profile(tmp_path, "child")
    assert child.port == 9000 and child.alias == "m"
    assert child.speculative.type == "ngram-simple" and child.speculative.draft_n_max == 6
    assert child.inherits_chain == ("base",)
    assert "abstract" in error_of(tmp_path, "base")


def test_inheritance_cycle_is_reported(tmp_path: Path) -> None:
    write(tmp_path, "a", 'inherits = "b"\n')
    write(tmp_path, "b", 'inherits = "a"\n')
    assert "inheritance cycle a -> b -> a" in error_of(tmp_path, "a")


def test_draft_types_need_a_draft_model(tmp_path: Path) -> None:
    write(tmp_path, "p", GOOD.replace('type = "mtp"', 'type = "dflash"'))
    assert "needs draft_model" in error_of(tmp_path, "p")


def test_list_profiles_reports_each_error_without_raising(tmp_path: Path) -> None:
    write(tmp_path, "good", GOOD)
    write(tmp_path, "bad", GOOD.replace("port = 8080", "port = -1"))
    listing = {item.name: item for item in list_profiles(tmp_path)}
    assert listing["good"].error is None
    assert listing["bad"].error is not None and "'port' must be >= 1" in listing["bad"].error


@pytest.mark.parametrize("directory", ["tiny", "qwen3.6-27b"])
def test_shipped_example_profiles_validate(directory: str) -> None:
    listing = list_profiles(REPO / "profiles" / directory)
    assert listing, directory
    assert [item.error for item in listing if item.error] == []


def test_seed_box_profiles_share_alias_and_port() -> None:
    directory = REPO / "profiles" / "qwen3.6-27b"
    profiles = [load_profile(directory, name) for name in ("autoregressive", "dflash", "mtp")]
    assert {p.alias for p in profiles} == {"qwen3.6-27b-q4_k_m"} and {p.port for p in profiles} == {8080}
    mtp = profiles[2]
    assert mtp.speculative.draft_n_max == 6 and mtp.speculative.draft_p_min == 0.75
    assert mtp.reasoning_budget == 256 and mtp.ctx_size == 131072 and mtp.cache_type_k == "q4_0"
    assert read_source(directory / "mtp.toml").text.startswith("#")
