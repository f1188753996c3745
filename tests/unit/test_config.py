"""specd.toml: search order, the one-deployment shorthand, several deployments, errors."""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import pytest

from specd.errors import ConfigError, UsageError
from specd.profiles.config import load_config, resolve_config_path
from specd.tune.bench import Settings
from specd.tune.tuner import tune_deployment


def test_shorthand_keys_work_as_written(tmp_path: Path) -> None:
    path = tmp_path / "specd.toml"
    path.write_text('unit = "llama-server.service"   # the unit specd owns\nscope = "user"\nprofiles_dir = "p"\n')
    deployment = load_config(path).deployment()
    assert deployment.unit == "llama-server.service" and deployment.scope == "user"
    assert deployment.profiles_dir == tmp_path / "p"


def test_search_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("SPECD_CONFIG", raising=False)
    assert resolve_config_path() == tmp_path / "xdg" / "specd" / "specd.toml"
    monkeypatch.setenv("SPECD_CONFIG", str(tmp_path / "env.toml"))
    assert resolve_config_path() == tmp_path / "env.toml"
    assert resolve_config_path(tmp_path / "flag.toml") == tmp_path / "flag.toml"


def test_several_deployments_and_unit_selection(tmp_path: Path) -> None:
    path = tmp_path / "specd.toml"
    path.write_text(
        '[[deployment]]\nunit = "big.service"\nprofiles_dir = "/p/big"\n[deployment.proxy]\nlisten = "127.0.0.1:8080"\n'
        '[[deployment]]\nunit = "small.service"\nprofiles_dir = "/p/small"\nscope = "system"\n'
    )
    config = load_config(path)
    assert config.deployment("small").scope == "system"
    assert config.deployment("big.service").proxy is not None
    with pytest.raises(ConfigError, match="pick one with --unit"):
        config.deployment()
    with pytest.raises(ConfigError, match="no deployment for unit 'other.service'"):
        config.deployment("other")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('unit = "llama-server"\nprofiles_dir = "p"\n', "ending in .service"),
        ('unit = "a.service"\nscope = "users"\nprofiles_dir = "p"\n', "did you mean 'user'"),
        ('unit = "a.service"\nprofile_dir = "p"\n', "did you mean 'profiles_dir'"),
        ('unit = "a.service"\nprofiles_dir = "p"\n[tuner]\nmargin = "5%"\n', "'tuner.margin' must be a number"),
        ('unit = "a.service"\nprofiles_dir = "p"\n[tuner]\nsweep = ["draft_n_max=8..2"]\n',
         "line 4: 'tuner.sweep' draft_n_max=8..2: the range 8..2 must run upwards"),
        ('unit = "a.service"\nprofiles_dir = "p"\n[tuner]\nsweep = ["draft_nmax=2..8"]\n',
         "'draft_nmax' is not a [speculative] key a sweep can vary (sweepable: "),
        ('unit = "a.service"\nprofiles_dir = "p"\n[tuner]\nsweep = "draft_n_max=2..8"\n',
         "'tuner.sweep' must be a list"),
        ('unit = "a.service"\nprofiles_dir = "p"\n[tuner]\nn = 12\nmax_n = 8\n',
         "line 5: 'tuner.max_n' (8) must be at least 'tuner.n' (12)"),
        ('unit = "a.service"\nprofiles_dir = "p"\n[tuner]\nmax_n = 0\n', "'tuner.max_n' must be >= 1, not 0"),
        ('unit = "a.service"\n', "'profiles_dir' is required"),
        ('unit = "a.service\nprofiles_dir = "p"\n', "TOML syntax error"),
    ],
)
def test_config_errors_name_the_problem(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "specd.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert expected in str(info.value) and str(path) in str(info.value)


def test_missing_config_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "none.toml")
    assert "specd quickstart" in str(info.value)


def test_the_nightly_sweep_is_read_as_specd_tune_sweep_takes_it(tmp_path: Path) -> None:
    path = tmp_path / "specd.toml"
    path.write_text('unit = "a.service"\nprofiles_dir = "p"\n[tuner]\n'
                    'sweep = ["draft_n_max=2..4", "draft_p_min=0.5,0.9"]\n')
    assert load_config(path).tuner.sweep == ("draft_n_max=2..4", "draft_p_min=0.5,0.9")
    path.write_text('unit = "a.service"\nprofiles_dir = "p"\n[tuner]\nsweep = ["draft_n_max=2..4", "draft_n_max=6"]\n')
    with pytest.raises(ConfigError, match="names a key twice: draft_n_max, draft_n_max"):
        load_config(path)


def test_the_sample_cap_is_the_budgets_unless_the_config_sets_one(tmp_path: Path) -> None:
    """Without [tuner] max_n an undecided candidate is sampled up to 32 x n (the night's budget ends it
    first in practice); with it, up to max_n."""
    path = tmp_path / "specd.toml"
    path.write_text('unit = "a.service"\nprofiles_dir = "p"\n[tuner]\nn = 6\n')
    tuner = load_config(path).tuner
    assert tuner.max_n is None and Settings(n=tuner.n, max_n=tuner.max_n).cap == 192
    path.write_text('unit = "a.service"\nprofiles_dir = "p"\n[tuner]\nn = 6\nmax_n = 24\n')
    tuner = load_config(path).tuner
    assert Settings(n=tuner.n, max_n=tuner.max_n).cap == 24


def test_an_n_above_the_configs_sample_cap_is_refused_naming_the_config(tmp_path: Path) -> None:
    """`specd tune --n 20` with `[tuner] max_n = 16` in specd.toml: the 16 came from the file, so the error
    names the file and the key (not only --max-n, which the user never passed), before anything is benched."""
    path = tmp_path / "specd.toml"
    path.write_text('unit = "a.service"\nprofiles_dir = "p"\n[tuner]\nmax_n = 16\n')
    config = load_config(path)

    def no_seams() -> NoReturn:
        raise AssertionError("the check comes before any seam is built")

    with pytest.raises(UsageError) as info:
        tune_deployment(config, config.deployment(), seams=no_seams, workload="builtin:code", n=20)
    assert f"{path}: [tuner] max_n = 16 is below --n 20" in str(info.value)
