"""Speculation must be seen working: the rule on drafted tokens, and the tuner leaving an inactive speculator out."""

from __future__ import annotations

from specd.emulator.model import load_model
from specd.tune.activity import INACTIVE, MIN_OUTPUT_TOKENS, judge
from specd.tune.bench import ModelTarget, Result, Settings
from specd.tune.tuner import tune
from specd.tune.workloads import Workload, ask


def result(draft_n: int | None, *, output_tokens: int = 64, has_timings: bool = True) -> Result:
    return Result(profile="p", request_index=0, task_class="code", prompt_tokens=10, output_tokens=output_tokens,
                  prefill_ms=1.0, decode_ms=10.0, wall_ms=11.0, draft_n=draft_n,
                  draft_accepted=None if draft_n is None else draft_n // 2, has_timings=has_timings)


def test_a_speculator_that_never_drafts_is_inactive_and_one_draft_is_enough() -> None:
    never = judge("ngram", True, [result(None), result(0), result(None)])
    assert never.verdict == "inactive" and never.excluded
    assert INACTIVE in never.sentence and "3 requests" in never.sentence
    once = judge("ngram", True, [result(None), result(5), result(None)])
    assert once.verdict == "active" and not once.excluded
    assert (once.draft_n, once.draft_accepted, once.requests) == (5, 2, 3)


def test_a_plain_profile_that_drafts_is_caught_and_one_that_does_not_is_plain() -> None:
    assert judge("none", False, [result(12), result(None)]).verdict == "drafting-plain"
    assert judge("none", False, [result(None), result(None)]).verdict == "plain"


def test_without_timings_or_long_enough_answers_nothing_is_concluded() -> None:
    """A fork that sends no `timings`, or answers too short to draft from, say nothing either way."""
    assert judge("ngram", True, [result(None, has_timings=False)] * 4).verdict == "unknown"
    short = [result(None, output_tokens=MIN_OUTPUT_TOKENS - 1)] * 4
    assert judge("ngram", True, short).verdict == "unknown"
    assert not judge("ngram", True, short).excluded


LONG_PROMPTS = Workload("long-prompts", tuple(ask("code", 40000, 16, seed, seed) for seed in range(6)))
MODES = {"mtp": "mtp", "ngram-dead": "none"}  # ngram-dead: configured to speculate, runs as plain decoding


def test_the_tuner_leaves_a_speculator_that_never_drafted_out_of_its_decision() -> None:
    """On long prompts plain decoding beats MTP (no prefill tax), so the dead speculator is fastest:
    without the check the tuner switches to it; with it, it is left out and the note says why."""
    settings = Settings(n=6, early_stop=False)
    blind = tune(ModelTarget(load_model(), MODES, active="mtp"), ["ngram-dead"], LONG_PROMPTS, settings)
    assert blind.decision.best == "ngram-dead" and blind.decision.switch, blind.decision.reason

    seen = tune(ModelTarget(load_model(), MODES, active="mtp"), ["ngram-dead"], LONG_PROMPTS, settings,
                speculative=lambda name: True)
    assert seen.activities["ngram-dead"].verdict == "inactive"
    assert seen.activities["mtp"].verdict == "active"
    assert [e.profile for e in seen.decision.estimates] == ["mtp"]
    assert not seen.decision.switch and seen.final_profile == "mtp"
    assert any(f"ngram-dead: left out of the decision ({INACTIVE})" in note for note in seen.decision.notes)


def test_an_inactive_active_profile_stays_the_baseline() -> None:
    """The profile serving now is the status quo whatever its speculator does: it is measured, not dropped."""
    seen = tune(ModelTarget(load_model(), MODES, active="ngram-dead"), ["mtp"], LONG_PROMPTS,
                Settings(n=6, early_stop=False), speculative=lambda name: True)
    assert {e.profile for e in seen.decision.estimates} == {"mtp", "ngram-dead"}
    assert any("kept as the baseline" in note for note in seen.decision.notes)
