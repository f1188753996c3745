"""Parameter sweeps: parsing --sweep, deriving variants, writing the winner with its base's comments,
and, on the emulator's performance model, a different best draft length for code and for creative.

The emulator's test is circular by construction: its draft-length model (emulator/model.py,
tokens_per_cost with the ASSUMED draft_step_cost of seeds-3090ti.toml) decides what is best; the
test checks that the sweep machinery finds that optimum through the tuner's own statistics and
writes it, not that real hardware behaves so.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import tomlkit

from specd.emulator.model import decode_rate, load_model
from specd.errors import UsageError
from specd.profiles.axes import Axis, parse_axis
from specd.profiles.load import load_profile
from specd.tune.bench import ModelTarget, Settings
from specd.tune.sweep import (
    MAX_VARIANTS,
    Variant,
    derive,
    engine_autotune,
    remove_stale,
    variant_text,
    winner_name,
)
from specd.tune.tuner import tune
from specd.tune.workloads import Workload, load_workload

BASE = """\
# MTP: the model's own next-token heads draft; no second model to load.
inherits = "plain"
description = "MTP heads"

[speculative]
type = "mtp"  # specd spells it for the binary (draft-mtp in 2026 builds)
"""
PLAIN = ('binary = "/opt/llama-server"\nmodel = "/models/m.gguf"\nalias = "m"\nport = 8080\n'
         'abstract = true\n')


def test_a_range_and_a_list_parse_to_checked_values_in_order() -> None:
    assert parse_axis("draft_n_max=2..5") == Axis("draft_n_max", (2, 3, 4, 5))
    assert parse_axis("draft_p_min=0.5,0.75, 0.9") == Axis("draft_p_min", (0.5, 0.75, 0.9))
    assert parse_axis("ngram_simple_size_n=8,12,8") == Axis("ngram_simple_size_n", (8, 12))


@pytest.mark.parametrize(("text", "says"), [
    ("draft_n_maxx=2..8", "'draft_n_maxx' is not a [speculative] key a sweep can vary"),
    ("ctx_size=1024,2048", "'ctx_size' is not a [speculative] key"),
    ("draft_model=/a,/b", "'draft_model' is not a [speculative] key"),
    ("draft_p_min=0.5,1.5", "draft_p_min must be <= 1.0, not 1.5"),
    ("draft_n_max=2,x", "draft_n_max takes an integer; 'x' is not one"),
    ("draft_p_min=0.1..0.9", "a range a..b is for integer keys"),
    ("draft_n_max=8..2", "the range 8..2 must run upwards"),
    ("draft_n_max", "expected KEY=A..B or KEY=V1,V2"),
    ("draft_n_max=2,,3", "an empty value in the list"),
])
def test_bad_sweeps_name_the_argument_the_key_and_the_value(text: str, says: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_axis(text)
    assert caught.value.message.startswith(f"--sweep {text}: ") and says in caught.value.message


def test_a_bad_key_lists_the_keys_that_can_be_swept() -> None:
    with pytest.raises(UsageError) as caught:
        parse_axis("draft_n_maxx=2..8")
    assert "draft_n_max" in (caught.value.hint or "") and "ngram_mod_n_match" in (caught.value.hint or "")


def test_variants_are_every_combination_but_the_base_own_setting() -> None:
    axes = [parse_axis("draft_n_max=2..4"), parse_axis("draft_p_min=0.5,0.75")]
    variants = derive("mtp", axes, {"draft_n_max": 3, "draft_p_min": 0.75})
    assert len(variants) == 5  # 3 x 2, less (3, 0.75): the base benches as itself
    assert Variant("mtp", (("draft_n_max", 3), ("draft_p_min", 0.75))) not in variants
    assert variants[0].name == "mtp.sweep.draft_n_max-2.draft_p_min-0.5"
    assert len({v.name for v in variants}) == 5


def test_a_name_too_long_for_a_profile_falls_back_to_a_checksum() -> None:
    long = Variant("a-rather-long-base-profile-name", (("ngram_simple_size_n", 12), ("ngram_simple_size_m", 48),
                                                        ("ngram_simple_min_hits", 2)))
    assert long.name.startswith("a-rather-long-base-profile-name.sweep.") and len(long.name) <= 64
    other = replace(long, settings=(("ngram_simple_size_n", 13), *long.settings[1:]))
    assert other.name != long.name


def test_too_many_or_repeated_axes_are_refused() -> None:
    with pytest.raises(UsageError, match="names a key twice"):
        derive("mtp", [parse_axis("draft_n_max=2..3"), parse_axis("draft_n_max=4..5")], {})
    with pytest.raises(UsageError, match=f"at most {MAX_VARIANTS}"):
        derive("mtp", [parse_axis("draft_n_max=1..12"), parse_axis("draft_p_min=0.1,0.2,0.3")], {})
    with pytest.raises(UsageError, match="nothing to compare"):
        derive("mtp", [parse_axis("draft_n_max=3")], {"draft_n_max": 3})


def test_a_variant_file_keeps_the_base_comments_and_loads(tmp_path: Path) -> None:
    (tmp_path / "plain.toml").write_text(PLAIN)
    variant = Variant("mtp", (("draft_n_max", 6),))
    text = variant_text(BASE, variant, "mtp with draft_n_max = 6")
    assert "# MTP: the model's own next-token heads draft" in text and "# specd spells it" in text
    (tmp_path / "mtp-draft_n_max-6.toml").write_text(text)
    loaded = load_profile(tmp_path, "mtp-draft_n_max-6")
    assert loaded.speculative.draft_n_max == 6 and loaded.speculative.type == "mtp"
    no_table = variant_text('inherits = "mtp"\n', variant, "d")
    assert tomlkit.parse(no_table)["speculative"] == {"draft_n_max": 6}


def test_the_winner_never_overwrites_a_file_and_stale_temporaries_go(tmp_path: Path) -> None:
    variant = Variant("mtp", (("draft_n_max", 6),))
    assert winner_name(tmp_path, variant) == "mtp-draft_n_max-6"
    (tmp_path / "mtp-draft_n_max-6.toml").write_text("# the owner's\n")
    assert winner_name(tmp_path, variant) == "mtp-draft_n_max-6-2"
    (tmp_path / f"{variant.name}.toml").write_text(BASE)
    assert remove_stale(tmp_path, "mtp") == [tmp_path / f"{variant.name}.toml"]
    assert (tmp_path / "mtp-draft_n_max-6.toml").read_text() == "# the owner's\n"


def same_length(workload: Workload, tokens: int = 256) -> Workload:
    """The built-in traffic of one class, every answer `tokens` long: walls comparable request to request."""
    return Workload(workload.name, tuple(replace(r, body={**r.body, "max_tokens": tokens})
                                         for r in workload.requests))


def sweep_on_emulator(tmp_path: Path, workload: str) -> tuple[str | None, Path | None]:
    """The sweep as `specd tune --sweep draft_n_max=1..8` runs it, on ModelTarget: the winner's file and value."""
    variants = derive("mtp", [parse_axis("draft_n_max=1..8")], {"draft_n_max": None})
    by_name = {v.name: v for v in variants}
    target = ModelTarget(load_model(), {"mtp": "mtp", **{name: "mtp" for name in by_name}}, active="mtp",
                         draft_n_max={v.name: int(v.settings[0][1]) for v in variants})
    written: list[Path] = []

    def write(best: str) -> str:
        name = winner_name(tmp_path, by_name[best])
        target.modes[name], target.draft_n_max[name] = "mtp", int(by_name[best].settings[0][1])  # it loads the file
        written.append(tmp_path / f"{name}.toml")
        written[-1].write_text(variant_text(BASE, by_name[best], f"mtp, best on {workload}"))
        return name

    # margin 2%: on creative traffic the best draft length buys about 6% over the base's default, which a
    # switch at the default 5% margin would have to prove with the whole interval past 5%
    result = tune(target, list(by_name), same_length(load_workload(workload)), Settings(n=24), margin=0.02,
                  speculative=lambda name: True, on_winner=write)
    assert result.final_profile == (written[0].stem if written else "mtp")
    return result.decision.best, (written[0] if written else None)


def test_on_the_emulator_code_and_creative_traffic_pick_different_draft_lengths(tmp_path: Path) -> None:
    mtp = load_model().mode("mtp")  # the model's own optimum, which the sweep should find
    assert max(range(1, 9), key=lambda k: decode_rate(mtp, 256, "code", draft_n_max=k)) in (5, 6)
    assert max(range(1, 9), key=lambda k: decode_rate(mtp, 256, "creative", draft_n_max=k)) in (1, 2)
    (tmp_path / "plain.toml").write_text(PLAIN)
    lengths = {}
    for workload in ("code", "creative"):
        best, path = sweep_on_emulator(tmp_path, workload)
        assert path is not None, f"{workload}: the tuner kept the base"
        loaded = load_profile(tmp_path, path.stem)
        assert f"{loaded.speculative.draft_n_max}" in str(best)
        assert "# MTP: the model's own next-token heads draft" in path.read_text()
        lengths[workload] = loaded.speculative.draft_n_max
    assert lengths["code"] is not None and lengths["creative"] is not None
    assert lengths["code"] >= 4 and lengths["creative"] <= 2, lengths


# ik_llama.cpp's --help line for its own tuner, verbatim (common/common.cpp, gpt_params_print_usage,
# ikawrakow/ik_llama.cpp at 8337e4c, 2026-08-15; added in PR #1595).
IK_AUTOTUNE_HELP = "  --spec-autotune                  automatically tune speculative params to maximize tokens/sec\n"


def test_engine_autotune_is_one_more_variant_only_where_the_binary_offers_it() -> None:
    offered = engine_autotune("mtp", offers_autotune=True, base_autotunes=False)
    assert offered is not None and offered.name == "mtp.sweep.autotune" and offered.describe() == "autotune = true"
    assert engine_autotune("mtp", offers_autotune=False, base_autotunes=False) is None  # llama.cpp: no such flag
    assert engine_autotune("mtp", offers_autotune=True, base_autotunes=True) is None  # the base already autotunes


def test_the_autotune_variant_renders_the_engines_flag_and_is_refused_by_a_binary_without_it(tmp_path: Path) -> None:
    from specd.errors import PreflightError
    from specd.profiles.flags import parse_help
    from specd.unit.render import build_argv
    from tests.fakes.fake_llama_server import HELP, SPEC_TYPE_OFF

    (tmp_path / "plain.toml").write_text(PLAIN)
    (tmp_path / "mtp.toml").write_text(BASE)
    variant = engine_autotune("mtp", offers_autotune=True, base_autotunes=False)
    assert variant is not None
    text = variant_text(BASE, variant, "mtp with the engine's own tuner")
    assert "autotune = true" in text and "# MTP: the model's own next-token heads draft" in text
    (tmp_path / "mtp-autotune.toml").write_text(text)
    profile = load_profile(tmp_path, "mtp-autotune")
    assert profile.speculative.autotune is True

    llama_cpp = HELP.replace("@SPEC_TYPE@", SPEC_TYPE_OFF)  # llama-server's layout, as the FAKE server prints it
    ik_llama = parse_help("/opt/ik_llama/llama-server", llama_cpp + IK_AUTOTUNE_HELP)
    assert "--spec-autotune" in build_argv(profile, ik_llama)
    assert "--spec-autotune" not in build_argv(load_profile(tmp_path, "mtp"), ik_llama)
    with pytest.raises(PreflightError,
                       match=r"autotune needs one of --spec-autotune, but /opt/llama-server offers none"):
        build_argv(profile, parse_help("/opt/llama-server", llama_cpp))


def test_the_written_winner_keeps_the_verification_its_temporary_file_earned(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Verified as `mtp.sweep.draft_n_max-5`, switched to as `mtp-draft_n_max-5`: `specd switch` and
    `specd profiles` must not call the winner unverified — unless its settings differ."""
    from specd.profiles.config import Deployment
    from specd.tune.verify import Verification, carry_verification, last_verification, save_verification

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    deployment = Deployment(unit="llama.service", scope="user", profiles_dir=tmp_path)
    (tmp_path / "plain.toml").write_text(PLAIN)
    (tmp_path / "mtp.toml").write_text(BASE)
    variant = Variant("mtp", (("draft_n_max", 5),))
    (tmp_path / f"{variant.name}.toml").write_text(variant_text(BASE, variant, "sweep of mtp (temporary)"))
    (tmp_path / "mtp-draft_n_max-5.toml").write_text(variant_text(BASE, variant, "mtp with draft_n_max = 5"))
    save_verification(deployment, Verification(variant.name, "plain", at=1000.0))

    assert last_verification(deployment, "mtp-draft_n_max-5") is None
    assert carry_verification(deployment, variant.name, "mtp-draft_n_max-5")
    carried = last_verification(deployment, "mtp-draft_n_max-5")
    assert carried is not None and carried.current and carried.structured_ok and carried.against == "plain"

    other = Variant("mtp", (("draft_n_max", 6),))
    (tmp_path / "mtp-draft_n_max-6.toml").write_text(variant_text(BASE, other, "not what was verified"))
    assert not carry_verification(deployment, variant.name, "mtp-draft_n_max-6")
    assert last_verification(deployment, "mtp-draft_n_max-6") is None
