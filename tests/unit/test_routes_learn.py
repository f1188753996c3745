"""Learning the routing table from bench results: per class, the tuner's paired decision moves a route only
on clear evidence; each profile's slowdown under load."""

from __future__ import annotations

import pytest

from specd.routing.table import Route, RoutingTable
from specd.traffic.taskclass import TaskClass
from specd.tune.bench import Result
from specd.tune.paired import compare, pairs_of
from specd.tune.routes import learn, paired

SIZES = [64, 128, 256, 512, 1024, 96, 384, 768]  # output tokens: the spread a median cannot see through


def results(profile: str, task_class: TaskClass, ms_per_token: float, *, level: int = 1, wobble: float = 0.02,
            first: int = 0) -> list[Result]:
    """One bench's rows for a profile: request `first + i` at plan position `first + i`, four rounds."""
    rows = []
    for i, tokens in enumerate(SIZES):
        wall = tokens * ms_per_token * (1.0 + wobble * ((i * 7) % 5 - 2) / 2)
        rows.append(Result(profile=profile, request_index=first + i, task_class=task_class, prompt_tokens=50,
                           output_tokens=tokens, prefill_ms=20.0, decode_ms=wall - 20.0, wall_ms=wall,
                           concurrency=level, position=first + i + (1000 if level > 1 else 0), round=i % 4))
    return rows


BENCH = {
    "mtp": results("mtp", "code", 22.0) + results("mtp", "creative", 40.0, first=100)
    + results("mtp", "code", 33.0, level=4),
    "plain": results("plain", "code", 35.0) + results("plain", "creative", 34.0, first=100)
    + results("plain", "code", 37.0, level=4),
}


def test_each_class_goes_to_its_clear_winner_on_paired_ratios_despite_the_size_spread() -> None:
    found = learn(BENCH, RoutingTable(), active="plain", margin=0.05, source="test", now=1.0)
    assert found.table.profile_for("code") == "mtp" and found.table.profile_for("creative") == "plain"
    assert found.changed == ("code", "creative")
    # decided on every pair (alone 22/35, at load 4 33/37), the ratio kept for the load rule is alone's
    assert "faster than plain" in found.table.routes["code"].reason
    assert found.table.ratio("code", "plain", "mtp") == pytest.approx(35 / 22, rel=0.02)
    assert found.table.ratio("creative", "mtp", "plain") == pytest.approx(40 / 34, rel=0.02)
    assert found.table.slowdown("code", "mtp", 4) == pytest.approx(1.5, rel=0.02)
    assert found.table.slowdown("code", "plain", 4) == pytest.approx(37 / 35, rel=0.02)
    assert found.table.profile_for("factual") is None  # no evidence: the serving profile
    assert found.sentence() == "routes changed: code -> mtp, creative -> plain"


def test_a_route_moves_only_past_the_margin_with_its_interval_clear() -> None:
    close = {"mtp": results("mtp", "code", 34.0), "plain": results("plain", "code", 35.0)}
    previous = RoutingTable(routes={"code": Route("plain", "earlier night")})
    found = learn(close, previous, active="plain", margin=0.05, source="test", now=2.0)
    assert found.table.profile_for("code") == "plain" and found.changed == ()
    assert "no profile is 5% faster" in found.table.routes["code"].reason
    noisy = {"mtp": results("mtp", "code", 30.0, wobble=0.9), "plain": results("plain", "code", 35.0)}
    assert learn(noisy, previous, active="plain", margin=0.05, source="t", now=2.0).table.profile_for("code") == "plain"


def test_a_pin_keeps_every_route() -> None:
    previous = RoutingTable(routes={"code": Route("plain", "earlier night")})
    found = learn(BENCH, previous, active="plain", margin=0.05, source="test", now=2.0, pinned="plain")
    assert found.table.profile_for("code") == "plain" and "pinned" in found.table.routes["code"].reason


def test_a_class_with_too_few_requests_keeps_its_route_and_says_so() -> None:
    thin = {"mtp": results("mtp", "creative", 20.0)[:2], "plain": results("plain", "creative", 35.0)[:2]}
    previous = RoutingTable(routes={"creative": Route("plain", "earlier night")})
    found = learn(thin, previous, active="plain", margin=0.05, source="test", now=2.0)
    assert found.table.profile_for("creative") == "plain"
    assert "fewer than 3" in found.skipped["creative"]


def test_one_request_replayed_in_many_rounds_is_one_request_not_evidence_for_its_class() -> None:
    """The real run that found it: one copy-edit prompt of its class in the training half, replayed in 8
    rounds, read as '17% faster, interval 0.81-0.85' and sent the class to plain; on unseen prompts of
    the class n-gram took 0.70x plain's time. Replays measure the request again, not the class."""
    def replayed(profile: str, ms: float) -> list[Result]:
        return [Result(profile=profile, request_index=7, task_class="analysis", prompt_tokens=50, output_tokens=128,
                       prefill_ms=20.0, decode_ms=ms - 20.0, wall_ms=ms * (1 + 0.01 * (r % 3)), position=7 + 12 * r,
                       round=r) for r in range(8)]
    previous = RoutingTable(routes={"analysis": Route("ngram", "earlier night")})
    found = learn({"ngram": replayed("ngram", 3000.0), "plain": replayed("plain", 2500.0)}, previous,
                  active="ngram", margin=0.05, source="test", now=2.0)
    assert found.table.profile_for("analysis") == "ngram" and found.changed == ()
    assert "1 distinct request(s)" in found.skipped["analysis"]


def test_a_class_route_needs_its_prompts_to_agree_not_only_each_prompts_replays() -> None:
    """Three prompts of a class, each replayed in 8 rounds with little noise: mtp is 40% faster on two and
    35% slower on the third. Over rounds (the serving profile's rule, where the replayed traffic is the
    population) that is a tight "faster"; the next prompt of the class could be like any of the three, so
    the route's interval is over the prompts and does not clear the margin: the route stays."""
    def rows(profile: str, per_request: list[float]) -> list[Result]:
        return [Result(profile=profile, request_index=i, task_class="code", prompt_tokens=50, output_tokens=128,
                       prefill_ms=20.0, decode_ms=ms - 20.0, wall_ms=ms * (1 + 0.005 * ((r + i) % 3)),
                       position=i + 3 * r, round=r)
                for r in range(8) for i, ms in enumerate(per_request)]
    bench = {"mtp": rows("mtp", [600.0, 600.0, 1350.0]), "plain": rows("plain", [1000.0, 1000.0, 1000.0])}
    over_rounds = compare("mtp", "plain", pairs_of(bench["mtp"], bench["plain"]), 0.95, 0.05)
    assert over_rounds.verdict == "faster"  # what the route would have moved on before
    previous = RoutingTable(routes={"code": Route("plain", "earlier night")})
    found = learn(bench, previous, active="plain", margin=0.05, source="test", now=2.0)
    assert found.table.profile_for("code") == "plain" and found.changed == ()
    assert "24 paired requests of 3 distinct" in found.table.routes["code"].reason


def test_pairs_are_the_same_plan_position_on_both_profiles() -> None:
    found = paired(results("mtp", "code", 20.0), results("plain", "code", 40.0))
    assert found is not None and found.interval.pairs == 8 and found.verdict == "faster"
    assert found.interval.ratio == pytest.approx(0.5, rel=0.03)
    assert paired(results("mtp", "code", 20.0), results("plain", "code", 40.0, first=500)) is None  # none shared
