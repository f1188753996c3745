"""Routing for real: the private systemd --user, the real llama-server and tiny model, the real daemon,
its proxy and the CLI. Clients send a mix of copy-style code asks and prose through the proxy without
pause while routing is turned on (a companion server starts beside the serving one), the serving
profile is switched, and routing is turned off: no request fails, each class reaches its profile,
and clients see one alias throughout.

The tiny profiles run with `threads = 1`, so the two servers fit this 2-core box side by side (and a
third does not: the switch restarts in place, and the companion answers while the serving one is
held). The table is the one a night's bench would leave (specd.tune.routes learns it; its unit tests
and benchmarks/routing_real.py measure that part).
"""

from __future__ import annotations

import json
import signal
from typing import Any

import httpx
import pytest

from specd.deploy.companions import companion_units
from specd.routing.state import RoutingState, write_state
from specd.routing.table import Ratio, Route, RoutingTable
from specd.setup.sandbox import free_port
from specd.tune.workloads import load_workload
from tests.conftest import Box
from tests.system.daemon_rig import RunningDaemon, real_stack
from tests.system.test_bench import emulated_profiles
from tests.system.test_daemon import Load

COPY = dict(load_workload("repeat-input").requests[0].body)
PROSE = dict(load_workload("prose").requests[0].body)
TABLE = RoutingTable(routes={
    "code": Route("ngram-simple", "n-gram drafts what the answer copies",
                  ratios={"autoregressive": Ratio(1.3, 1.2, 1.4, 6)}),
    "creative": Route("autoregressive", "prose: n-gram drafting only costs",
                      ratios={"ngram-simple": Ratio(1.1, 1.05, 1.15, 6)}),
})


def mixed(stream: bool, n: int) -> dict[str, Any]:
    """Copy-style code and prose in turn, short (the tiny model on one thread of a busy box)."""
    return {**(COPY if n % 2 else PROSE), "model": "tiny", "max_tokens": 12, "stream": stream}


def routed(daemon: RunningDaemon, unit: str) -> dict[str, int]:
    counts: dict[str, int] = daemon.proxy_state(unit).get("routing", {}).get("routed", {})
    return counts


def served_by(counts: dict[str, int], profile: str) -> int:
    return sum(n for key, n in counts.items() if key.startswith(f"{profile} "))


@real_stack
def test_routing_on_a_switch_and_off_under_load_fail_no_request(box: Box, start_daemon: Any) -> None:
    box.edit_profile("base", threads=1)
    box.specd("switch", "ngram-simple", "--strategy", "restart", check=True)
    companion_port = free_port()
    daemon = start_daemon(extra=f"[routing]\nport = {companion_port}\n")
    write_state(box.state, box.unit, RoutingState(table=TABLE))  # as the night's bench would leave it
    companion = f"{box.unit.removesuffix('.service')}-route-autoregressive.service"
    with Load(daemon.proxy_url, clients=2, body=mixed) as load:
        daemon.wait_for("traffic before routing", lambda: load.sent >= 2, timeout_s=180)

        on = json.loads(box.specd("route", "on", "--json", check=True).stdout)
        assert on["on"] and on["mode"] == "servers"
        assert [r["profile"] for r in on["residents"]] == ["autoregressive"]
        # the pinned build compiles per-request draft settings out: the probe says so, and two servers run
        assert on["probe"]["verdict"] == "ignored", on["probe"]
        daemon.wait_for("prose answered by the companion", lambda: served_by(routed(daemon, box.unit),
                                                                             "autoregressive") >= 2, timeout_s=180)
        models = httpx.get(f"{daemon.proxy_url}/v1/models", timeout=10).json()["data"]
        assert [m["id"] for m in models] == ["tiny"]  # one alias, as before
        assert "routing" in box.specd("status", check=True).stdout

        switched = box.specd("switch", "ngram-mod", check=True)  # three servers do not fit: a restart
        assert "restart" in switched.stdout + switched.stderr
        before = load.sent
        daemon.wait_for("requests after the switch", lambda: load.sent >= before + 2, timeout_s=180)

        box.specd("route", "off", check=True)
        before = load.sent
        daemon.wait_for("requests after routing off", lambda: load.sent >= before + 2, timeout_s=180)
    assert load.failures == [], f"{len(load.failures)} of {load.sent} failed:\n" + "\n".join(load.failures[:10])
    counts = routed(daemon, box.unit)
    assert served_by(counts, "ngram-simple") + served_by(counts, "ngram-mod") >= 1 and served_by(
        counts, "autoregressive") >= 2, counts
    assert not (box.manager.unit_dir / companion).exists()
    assert daemon.systemctl("is-active", companion).stdout.strip() in ("inactive", "unknown", "failed")
    assert daemon.proxy_state(box.unit)["routing"]["on"] is False
    kinds = [row["kind"] for row in box.history().events(box.unit)]
    assert "route-on" in kinds and "route-off" in kinds
    shown = box.specd("route", check=True).stdout
    assert "routing for" in shown and "creative  -> autoregressive" in shown
    dry = json.loads(box.specd("route", "--dry-run", "--json", check=True).stdout)  # on what the proxy recorded
    assert dry["requests"] >= 4 and dry["sent"].get("autoregressive", 0) >= 1 and dry["gain"] is not None, dry


@pytest.mark.systemd
def test_where_the_engine_honours_per_request_settings_one_server_serves_each_class_its_own(
        box: Box, start_daemon: Any) -> None:
    """specd-emulator (a performance EMULATOR, named so) as older llama-server builds that read
    speculative.n_max per request: route on finds that out, starts no companion, and the proxy stamps
    each class's settings; a client's own setting wins; route off stops stamping."""
    emulated_profiles(box, ("plain", "mtp"), time_scale=0.001)
    box.edit_profile("mtp", args=["--emulator-time-scale", "0.001", "--spec-type", "draft-mtp",
                                  "--emulator-per-request-draft"])
    box.specd("switch", "mtp", "--strategy", "restart", check=True)
    daemon = start_daemon(extra=f"[routing]\nport = {free_port()}\n")
    write_state(box.state, box.unit, RoutingState(table=RoutingTable(routes={
        "code": Route("mtp", "drafts pay on code"), "creative": Route("plain", "drafts cost on prose")})))

    def drafted(text: str, **extra: Any) -> int:
        body = {"model": "tiny", "messages": [{"role": "user", "content": text}], "max_tokens": 64, **extra}
        answer = httpx.post(f"{daemon.proxy_url}/v1/chat/completions", json=body, timeout=60)
        assert answer.status_code == 200, answer.text
        return int(answer.json()["timings"].get("draft_n") or 0)

    story, code = "Write a short story about a lighthouse keeper.", "Write a Python function that merges two lists."
    assert drafted(story) > 0  # routing off: the server drafts on everything
    on = json.loads(box.specd("route", "on", "--json", check=True).stdout)
    assert on["mode"] == "per-request" and on["residents"] == [] and on["probe"]["verdict"] == "honoured"
    assert on["stamps"]["creative"] == {"speculative.n_max": 0, "speculative.n_min": 0}
    assert companion_units(box.deployment) == []
    daemon.wait_for("the proxy to stamp", lambda: drafted(story) == 0)
    assert drafted(code) > 0
    assert drafted(story, **{"speculative.n_max": 3}) > 0  # the client's own setting wins
    box.specd("route", "off", check=True)
    assert drafted(story) > 0


@pytest.mark.systemd
def test_a_route_on_killed_after_its_companion_started_changes_nothing_clients_see(box: Box) -> None:
    """kill -9 after the companion passed its gate, before the state names it: routing stays off, and the
    next route command stops and removes the orphan. specd-emulator (an EMULATOR) stands in for the servers."""
    emulated_profiles(box, ("plain", "mtp"), time_scale=0.001)
    box.edit_profile("base", threads=1)  # both fit the cores (a profile with 2 threads is refused, naming why)
    box.config_path.write_text(box.config_path.read_text() + f"\n[routing]\nport = {free_port()}\nmode = \"servers\"\n")
    box.specd("switch", "mtp", "--strategy", "restart", check=True)
    killed = box.specd("route", "on", "--profile", "plain", env={"SPECD_FAULT": "route-gate"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert companion_units(box.deployment) == [f"{box.unit.removesuffix('.service')}-route-plain.service"]
    assert not json.loads(box.specd("route", "--json", check=True).stdout)["on"]
    off = box.specd("route", "off", check=True)
    assert "route-remove" in off.stdout or companion_units(box.deployment) == []
    assert companion_units(box.deployment) == []
