"""The router's pure parts: the table and its costs, the per-request choice, conversation affinity,
per-request draft settings, the probe's verdict and the routing state file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specd.errors import UsageError
from specd.paths import StateDir
from specd.routing.affinity import Affinity
from specd.routing.choose import Server, choose
from specd.routing.probe import judge
from specd.routing.stamp import stamp, stamp_of, stamped_bytes, stamps_for
from specd.routing.state import Resident, RoutingState, read_state, write_state
from specd.routing.table import Ratio, Route, RoutingTable, describe, table_from_json


def ratio(value: float, n: int = 8) -> Ratio:
    return Ratio(value, value * 0.95, value * 1.05, n)


# Alone, code is faster on mtp (plain takes 1.67x as long), creative on plain (mtp takes 1.25x);
# mtp slows down under load far more than plain.
TABLE = RoutingTable(
    routes={"code": Route("mtp", "mtp 40% faster", ratios={"plain": ratio(1.67)}),
            "creative": Route("plain", "plain 20% faster", ratios={"mtp": ratio(1.25)})},
    slowdowns={"code": {"mtp": {4: ratio(1.5)}, "plain": {4: ratio(1.06)}},
               "creative": {"mtp": {4: ratio(1.5)}, "plain": {4: ratio(1.06)}}},
    margin=0.05)

MTP, PLAIN = "http://127.0.0.1:9001", "http://127.0.0.1:9002"


def servers(mtp_load: int = 0, plain_load: int = 0, *, mtp_up: bool = True, plain_up: bool = True) -> list[Server]:
    return [Server(MTP, "mtp", mtp_load, mtp_up, primary=True), Server(PLAIN, "plain", plain_load, plain_up)]


def test_idle_servers_follow_the_table() -> None:
    assert choose("code", servers(), TABLE).server.key == MTP
    assert choose("creative", servers(), TABLE).server.key == PLAIN
    assert choose("creative", servers(), TABLE).reason == "route"


def test_a_class_without_a_route_goes_to_the_primary() -> None:
    found = choose("factual", servers(), TABLE)
    assert (found.server.key, found.reason) == (MTP, "default")


def test_a_busy_speculative_server_loses_a_request_the_idle_plain_one_answers_sooner() -> None:
    # code on mtp with 5 in flight: 1.5 + (1.5 - 1) / 3 * 2 = 1.83x its time alone; idle plain: 1.67x
    found = choose("code", servers(mtp_load=5), TABLE)
    assert (found.server.key, found.reason) == (PLAIN, "load")
    # with 3 in flight (level 4: 1.5x) mtp still answers sooner than plain alone
    assert choose("code", servers(mtp_load=3), TABLE).server.key == MTP


def test_an_idle_routed_server_always_gets_its_class() -> None:
    assert choose("creative", servers(mtp_load=0, plain_load=0), TABLE).reason == "route"
    lopsided = RoutingTable(routes={"code": Route("mtp", "bench", ratios={"plain": ratio(0.5)})}, margin=0.05)
    assert choose("code", servers(), lopsided).server.key == MTP  # the route holds while mtp is idle


def test_without_load_measurements_the_busy_rule_moves_a_request_only_past_busy_at() -> None:
    bare = RoutingTable(routes={"code": Route("mtp", "configured")})
    assert choose("code", servers(mtp_load=3), bare, busy_at=4).server.key == MTP
    assert choose("code", servers(mtp_load=4, plain_load=1), bare, busy_at=4).server.key == PLAIN
    assert choose("code", servers(mtp_load=4, plain_load=4), bare, busy_at=4).server.key == MTP


def test_a_down_server_drains_to_the_other_whatever_the_table_says() -> None:
    found = choose("creative", servers(plain_up=False), TABLE)
    assert (found.server.key, found.reason) == (MTP, "drained")
    found = choose("code", servers(mtp_up=False), TABLE)
    assert (found.server.key, found.reason) == (PLAIN, "drained")


def test_nothing_up_goes_to_the_primary_whose_gate_holds_it() -> None:
    found = choose("creative", servers(mtp_up=False, plain_up=False), TABLE)
    assert found.server.key == MTP


def test_a_conversation_stays_where_its_prefix_is_cached_while_that_server_is_up() -> None:
    found = choose("creative", servers(), TABLE, conversation_on=MTP)
    assert (found.server.key, found.reason) == (MTP, "conversation")
    assert choose("creative", servers(mtp_up=False), TABLE, conversation_on=MTP).server.key == PLAIN


def test_two_servers_of_one_profile_share_its_class_by_load() -> None:
    pair = [Server(MTP, "mtp", 2, True, primary=True), Server(PLAIN, "mtp", 0, True)]
    assert choose("code", pair, TABLE).server.key == PLAIN


def test_slowdowns_interpolate_from_alone_and_extrapolate_upwards_only() -> None:
    assert TABLE.slowdown("code", "mtp", 1) == 1.0
    assert TABLE.slowdown("code", "mtp", 2) == pytest.approx(1 + 0.5 / 3)
    assert TABLE.slowdown("code", "mtp", 7) == pytest.approx(2.0)
    falling = RoutingTable(slowdowns={"code": {"mtp": {2: ratio(1.4), 4: ratio(1.2)}}})
    assert falling.slowdown("code", "mtp", 8) == pytest.approx(1.2)  # never cheaper past the last level
    assert TABLE.slowdown("factual", "mtp", 3) is None


def test_ratios_between_any_two_profiles_of_a_class() -> None:
    assert TABLE.ratio("code", "plain", "mtp") == pytest.approx(1.67)
    assert TABLE.ratio("code", "mtp", "plain") == pytest.approx(1 / 1.67)
    assert TABLE.ratio("code", "mtp", "mtp") == 1.0
    three = RoutingTable(routes={"code": Route("mtp", "", ratios={"plain": ratio(2.0), "ngram": ratio(1.5)})})
    assert three.ratio("code", "plain", "ngram") == pytest.approx(2.0 / 1.5)
    assert TABLE.ratio("factual", "plain", "mtp") is None


def test_the_table_round_trips_and_bad_input_names_the_key() -> None:
    again = table_from_json(json.loads(json.dumps(TABLE.as_json())))
    assert again.profile_for("code") == "mtp" and again.ratio("code", "plain", "mtp") == pytest.approx(1.67)
    assert again.slowdown("code", "mtp", 4) == pytest.approx(1.5)
    assert table_from_json({"routes": {"code": "mtp"}}).profile_for("code") == "mtp"
    with pytest.raises(UsageError, match="unknown task class 'poetry'"):
        table_from_json({"routes": {"poetry": "mtp"}})
    with pytest.raises(UsageError, match=r"slowdowns.code.mtp: load level '1'"):
        table_from_json({"slowdowns": {"code": {"mtp": {"1": [1.0, 1.0, 1.0, 3]}}}})
    with pytest.raises(UsageError, match=r"slowdowns.code.mtp.2: a ratio is"):
        table_from_json({"slowdowns": {"code": {"mtp": {"2": [1, 2]}}}})
    assert TABLE.profiles() == ["mtp", "plain"]


def test_describe_says_each_class_and_why() -> None:
    lines = describe(TABLE)
    assert lines[0].startswith("code") and "mtp: mtp 40% faster" in lines[0]
    assert any(line.startswith("factual") and "serving profile" in line for line in lines)
    assert "no routing table yet" in describe(RoutingTable())[0]


def test_affinity_follows_a_conversation_until_its_cache_is_stale() -> None:
    seen = Affinity(ttl_s=60.0, capacity=2)
    seen.note("conv-a", MTP, now=0.0)
    assert seen.server_of("conv-a", now=59.0) == MTP
    assert seen.server_of("conv-a", now=61.0) is None
    seen.note("conv-a", MTP, now=100.0)
    seen.note("conv-b", PLAIN, now=101.0)
    seen.note("conv-c", PLAIN, now=102.0)  # over capacity: the least recently seen goes
    assert seen.server_of("conv-a", now=103.0) is None and len(seen) == 2
    seen.forget_server(PLAIN)
    assert seen.server_of("conv-b", now=103.0) is None
    assert seen.server_of(None, now=0.0) is None


def test_a_profile_becomes_request_fields_and_the_clients_own_win() -> None:
    assert stamp_of({"type": "none"}) == {"speculative.n_max": 0, "speculative.n_min": 0}
    assert stamp_of({"type": "draft", "draft_n_max": 6, "draft_p_min": 0.75}) == {
        "speculative.n_max": 6, "speculative.p_min": 0.75}
    body = {"messages": [], "speculative.n_max": 3}
    assert stamp(body, {"speculative.n_max": 0, "speculative.n_min": 0}) == {
        "messages": [], "speculative.n_max": 3, "speculative.n_min": 0}
    nested = {"messages": [], "speculative": {"n_max": 2, "n_min": 1}}
    assert stamp(nested, {"speculative.n_max": 0, "speculative.n_min": 0}) is None
    assert stamped_bytes({"a": 1}, {"speculative.n_max": 0}) == b'{"a":1,"speculative.n_max":0}'
    speculative = {"mtp": {"type": "mtp", "draft_n_max": 4}, "plain": {"type": "none"}}
    stamps = stamps_for(TABLE, speculative)
    assert stamps == {"code": {"speculative.n_max": 4}, "creative": {"speculative.n_max": 0, "speculative.n_min": 0}}
    # the serving profile's own classes need nothing stamped: the server runs its settings already
    assert stamps_for(TABLE, speculative, serving="mtp") == {"creative": {"speculative.n_max": 0,
                                                                          "speculative.n_min": 0}}


def test_the_probe_verdicts() -> None:
    assert judge(37, 37).verdict == "ignored"
    assert judge(37, None).verdict == "honoured"
    assert judge(37, 0).honoured
    assert judge(None, None).verdict == "unknown"
    assert judge(0, 5).verdict == "unknown"
    refused = judge(37, None, 400, "unknown field speculative.n_max")
    assert refused.verdict == "refused" and "HTTP 400" in refused.detail


def test_routing_state_round_trips_and_a_broken_file_is_routing_off(tmp_path: Path) -> None:
    state = StateDir(tmp_path)
    assert read_state(state, "llama.service") == RoutingState()
    wanted = RoutingState(on=True, residents=(Resident("plain", "llama-route-plain.service"),), table=TABLE,
                          stamps={"code": {"speculative.n_max": 4}}, probe=judge(37, 37).as_json(), note="on")
    write_state(state, "llama.service", wanted)
    assert (state.routing("llama.service").stat().st_mode & 0o777) == 0o600
    again = read_state(state, "llama.service")
    assert again.on and again.residents == wanted.residents and again.table.profiles() == TABLE.profiles()
    assert again.table.ratio("code", "plain", "mtp") == pytest.approx(1.67)
    assert again.stamps == wanted.stamps and again.probe is not None and again.probe["verdict"] == "ignored"
    state.routing("llama.service").write_text('{"on": true, "mode": "sideways"}')
    assert read_state(state, "llama.service") == RoutingState()
    state.routing("llama.service").write_text("{not json")
    assert not read_state(state, "llama.service").on
