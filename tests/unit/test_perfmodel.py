"""The fitted performance model recovers known rates from noisy synthetic bench samples."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specd.errors import UsageError
from specd.traffic.taskclass import TASK_CLASSES, TaskClass
from specd.tune.perfmodel import (
    MixItem,
    PerfModel,
    Sample,
    crossover_output_tokens,
    expected_wall_ms,
    fit,
    fit_all,
    predict_wall_ms,
)

PROMPTS = (128, 512, 2048, 8192, 32768)
OUTPUTS = (64, 128, 256, 512, 1024, 2048)


def plain_decode(out: float) -> float:
    return 29.0


def spec_decode(out: float) -> float:
    """A drafter that collapses: 47 tok/s at short outputs, 30 at 2048 (seed 002's DFlash shape)."""
    return float(np.interp(out, [64, 2048], [47.0, 30.0]))


def synth(profile: str, prefill_rate: float, decode: object, factors: dict[TaskClass, float], seed: int,
          sigma: float = 0.03, concurrency: int = 1, batch_factor: float = 1.0) -> list[Sample]:
    rng = np.random.default_rng(seed)
    samples = []
    for task_class in TASK_CLASSES:
        for prompt in PROMPTS:
            for out in OUTPUTS:
                rate = decode(out) * factors[task_class] * batch_factor  # type: ignore[operator]
                prefill_ms = 1000.0 * prompt / prefill_rate * math.exp(rng.normal(0, sigma))
                decode_ms = 1000.0 * out / rate * math.exp(rng.normal(0, sigma))
                drafted = out if factors[task_class] != 1.0 else None
                samples.append(Sample(profile, task_class, prompt, out, prefill_ms, decode_ms,
                                      prefill_ms + decode_ms + 20.0, drafted,
                                      None if drafted is None else int(out * 0.5), concurrency))
    return samples


FLAT: dict[TaskClass, float] = dict.fromkeys(TASK_CLASSES, 1.0)
SPEC: dict[TaskClass, float] = {"code": 1.3, "factual": 1.1, "analysis": 0.9, "creative": 0.7, "edit": 1.5}


@pytest.fixture(scope="module")
def plain() -> PerfModel:
    return fit(synth("plain", 1150.0, plain_decode, FLAT, seed=1))


@pytest.fixture(scope="module")
def spec() -> PerfModel:
    return fit(synth("spec", 900.0, spec_decode, SPEC, seed=2))


def truth_ms(prefill_rate: float, decode_rate: float, prompt: int, out: int) -> float:
    return 20.0 + 1000.0 * prompt / prefill_rate + 1000.0 * out / decode_rate


def test_recovers_rates(plain: PerfModel, spec: PerfModel) -> None:
    for prompt, out in ((512, 256), (8192, 1024), (300, 100), (20000, 1500)):
        assert predict_wall_ms(plain, prompt, out, "code") == pytest.approx(
            truth_ms(1150.0, 29.0, prompt, out), rel=0.04)
        assert predict_wall_ms(spec, prompt, out, "creative") == pytest.approx(
            truth_ms(900.0, spec_decode(out) * 0.7, prompt, out), rel=0.05)
    assert plain.overhead_ms == pytest.approx(20.0, abs=0.5)


def test_captures_the_decode_collapse(spec: PerfModel) -> None:
    rates = dict(spec.decode_points)
    short = min(rates)
    longest = max(rates)
    assert rates[short] > 1.35 * rates[longest]


def test_class_factors(spec: PerfModel, plain: PerfModel) -> None:
    ratio = spec.class_factor["code"] / spec.class_factor["creative"]
    assert ratio == pytest.approx(1.3 / 0.7, rel=0.05)
    assert plain.class_factor and all(f == pytest.approx(1.0, abs=0.03) for f in plain.class_factor.values())
    assert spec.acceptance["code"] == pytest.approx(0.5, abs=0.01)
    assert plain.acceptance == {}


def test_crossover_matches_the_analytic_one(plain: PerfModel, spec: PerfModel) -> None:
    prompt = 32768
    found = crossover_output_tokens(plain, spec, "code", prompt)
    assert found is not None
    tax_ms = 1000.0 * prompt / 900.0 - 1000.0 * prompt / 1150.0
    analytic = next(o for o in range(1, 8192)
                    if 1000.0 * o / 29.0 - 1000.0 * o / (spec_decode(o) * 1.3) > tax_ms)
    assert found.output_tokens == pytest.approx(analytic, rel=0.08)
    assert found.below == "plain" and found.above == "spec"
    assert found.sentence.startswith(f"plain wins below {found.output_tokens} output tokens, spec above")


def test_no_crossover_when_one_always_wins(plain: PerfModel, spec: PerfModel) -> None:
    assert crossover_output_tokens(plain, spec, "creative", 4096) is None
    assert crossover_output_tokens(spec, spec, "code", 512) is None


def test_expected_wall_of_a_mix_is_the_traffics_true_mean_wall(plain: PerfModel) -> None:
    """Against the generator's truth (prefill 1,150 tok/s, decode 29 tok/s, 20 ms overhead), not the
    model's own formula: three short code requests for each long creative one."""
    mix = [MixItem("code", 512, 128, 3.0), MixItem("creative", 2048, 1024, 1.0)]
    truth = (3 * truth_ms(1150.0, 29.0, 512, 128) + truth_ms(1150.0, 29.0, 2048, 1024)) / 4
    assert expected_wall_ms(plain, mix) == pytest.approx(truth, rel=0.05)
    # a weight counts as that many requests; only the proportions matter
    repeated = [MixItem("code", 512, 128), MixItem("code", 512, 128), MixItem("code", 512, 128),
                MixItem("creative", 2048, 1024)]
    assert expected_wall_ms(plain, repeated) == pytest.approx(expected_wall_ms(plain, mix))
    doubled = [MixItem(m.task_class, m.prompt_tokens, m.output_tokens, 2 * m.weight) for m in mix]
    assert expected_wall_ms(plain, doubled) == pytest.approx(expected_wall_ms(plain, mix))
    with pytest.raises(UsageError, match="empty"):
        expected_wall_ms(plain, [])


def test_mix_ranking_follows_the_traffic(plain: PerfModel, spec: PerfModel) -> None:
    code_heavy = [MixItem("code", 8192, 512)]
    creative_heavy = [MixItem("creative", 8192, 512)]
    assert expected_wall_ms(spec, code_heavy) < expected_wall_ms(plain, code_heavy)
    assert expected_wall_ms(spec, creative_heavy) > expected_wall_ms(plain, creative_heavy)


def test_concurrency_factor() -> None:
    samples = synth("spec", 900.0, spec_decode, SPEC, seed=3)
    samples += synth("spec", 900.0, spec_decode, SPEC, seed=4, concurrency=4, batch_factor=0.5)
    model = fit(samples)
    assert dict(model.concurrency_factor)[4.0] == pytest.approx(0.5, rel=0.05)
    solo = predict_wall_ms(model, 0, 512, "code")
    batched = predict_wall_ms(model, 0, 512, "code", concurrency=4)
    assert batched - model.overhead_ms == pytest.approx(2 * (solo - model.overhead_ms), rel=0.06)


def test_unseen_class_uses_the_pooled_curve() -> None:
    only_code = [s for s in synth("spec", 900.0, spec_decode, SPEC, seed=5) if s.task_class == "code"]
    model = fit(only_code)
    assert model.classes_seen == ("code",)
    assert model.class_factor["creative"] == 1.0 and model.class_factor["code"] == pytest.approx(1.0)


def test_fit_errors() -> None:
    mixed = synth("a", 1000.0, plain_decode, FLAT, seed=6)[:3] + synth("b", 1000.0, plain_decode, FLAT, seed=7)[:3]
    with pytest.raises(UsageError, match="several profiles"):
        fit(mixed)
    with pytest.raises(UsageError, match="'c'"):
        fit(mixed, "c")
    with pytest.raises(UsageError, match="no bench samples"):
        fit([])
    assert sorted(fit_all(mixed)) == ["a", "b"]
    no_decode = [Sample("a", "code", 100, 0, 100.0, 0.0, 100.0)]
    with pytest.raises(UsageError, match="cannot fit"):
        fit(no_decode)
