"""`specd route --dry-run`'s arithmetic over recorded requests: where the table would send them and the
expected gain against the best single profile, with the ratios' intervals carried through."""

from __future__ import annotations

import pytest

from specd.routing.dryrun import Recorded, dry_run
from specd.routing.table import Ratio, Route, RoutingTable

TABLE = RoutingTable(routes={
    "code": Route("ngram", "bench", ratios={"plain": Ratio(1.5, 1.4, 1.6, 12)}),
    "creative": Route("plain", "bench", ratios={"ngram": Ratio(1.25, 1.2, 1.3, 12)}),
})


def test_the_table_sends_each_class_to_its_route_and_prices_it_from_what_it_took() -> None:
    rows = [Recorded("code", "plain", 1500.0), Recorded("creative", "plain", 1000.0),
            Recorded("code", "ngram", 1000.0), Recorded("factual", "plain", 400.0)]
    found = dry_run(rows, TABLE, ["ngram", "plain"])
    assert found.sent == {"ngram": 2, "plain": 2}  # the factual one has no route: it stays where it was
    assert found.unpriced == 1
    # routed: code 1500 on plain -> 1000 on ngram; creative stays 1000; code on ngram 1000; factual 400
    assert found.routed.ms == pytest.approx(3400.0)
    # everything on plain: 1500 + 1000 + 1500 + 400; everything on ngram: 1000 + 1250 + 1000 + 400
    assert found.single["plain"].ms == pytest.approx(4400.0)
    assert found.single["ngram"].ms == pytest.approx(3650.0)
    assert found.best_single == "ngram"
    gain = found.gain()
    assert gain is not None and gain[0] == pytest.approx(1 - 3400 / 3650)
    assert gain[1] <= gain[0] <= gain[2]  # the interval's ends bracket the point
    assert found.as_json()["by_class"] == {"code": 2, "factual": 1, "creative": 1}


def test_no_recorded_traffic_is_no_gain_not_an_error() -> None:
    found = dry_run([], TABLE, ["ngram", "plain"])
    assert found.requests == 0 and found.routed.ms == 0.0 and found.gain() is None
