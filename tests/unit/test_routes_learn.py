"""Learning the routing table from bench results: per class, the tuner's decision, moved only on clear
evidence; the cells the router reads for load."""

from __future__ import annotations

from specd.routing.table import Route, RoutingTable
from specd.traffic.taskclass import TaskClass
from specd.tune.bench import Result
from specd.tune.routes import learn


def results(profile: str, task_class: TaskClass, walls: list[float], level: int = 1) -> list[Result]:
    return [Result(profile=profile, request_index=i, task_class=task_class, prompt_tokens=100, output_tokens=100,
                   prefill_ms=50.0, decode_ms=wall - 50.0, wall_ms=wall, concurrency=level)
            for i, wall in enumerate(walls)]


def spread(center: float, n: int = 8) -> list[float]:
    return [center * (1.0 + 0.01 * ((i * 7) % 5 - 2)) for i in range(n)]


BENCH = {
    "mtp": results("mtp", "code", spread(600)) + results("mtp", "creative", spread(1250))
    + results("mtp", "code", spread(900), level=4),
    "plain": results("plain", "code", spread(1000)) + results("plain", "creative", spread(1000))
    + results("plain", "code", spread(1060), level=4),
}


def test_each_class_goes_to_its_clear_winner_and_says_why() -> None:
    found = learn(BENCH, RoutingTable(), active="plain", margin=0.05, source="test", now=1.0)
    assert found.table.profile_for("code") == "mtp" and found.table.profile_for("creative") == "plain"
    assert found.changed == ("code", "creative")
    assert "faster than plain" in found.table.routes["code"].reason
    assert found.table.cost("code", "mtp", 4) is not None and found.table.cost("code", "mtp", 4) > 850
    assert found.table.profile_for("factual") is None  # no evidence: the serving profile
    assert "routes changed: code -> mtp, creative -> plain" in found.sentence()


def test_a_route_moves_only_past_the_margin_with_separated_intervals() -> None:
    close = {"mtp": results("mtp", "code", spread(980)), "plain": results("plain", "code", spread(1000))}
    previous = RoutingTable(routes={"code": Route("plain", "earlier night")})
    found = learn(close, previous, active="plain", margin=0.05, source="test", now=2.0)
    assert found.table.profile_for("code") == "plain" and found.changed == ()
    assert "below the 5% margin" in found.table.routes["code"].reason


def test_a_pin_keeps_every_route() -> None:
    previous = RoutingTable(routes={"code": Route("plain", "earlier night")})
    found = learn(BENCH, previous, active="plain", margin=0.05, source="test", now=2.0, pinned="plain")
    assert found.table.profile_for("code") == "plain" and "pinned" in found.table.routes["code"].reason


def test_a_class_with_too_few_requests_keeps_its_route_and_says_so() -> None:
    thin = {"mtp": results("mtp", "creative", [500.0, 510.0]), "plain": results("plain", "creative", [900.0, 905.0])}
    previous = RoutingTable(routes={"creative": Route("plain", "earlier night")})
    found = learn(thin, previous, active="plain", margin=0.05, source="test", now=2.0)
    assert found.table.profile_for("creative") == "plain"
    assert "fewer than 3" in found.skipped["creative"]
