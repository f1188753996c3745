"""The unattended night, end to end: what the daemon records is what the tuner benches.

The real daemon runs as a unit of the private systemd with its proxy; a traffic generator sends a
known mix at a known concurrency through the proxy; the daemon's own scheduler fires the nightly run
(`[tuner] cron` set to a second a little ahead); the run waits for its idle window, benches within
the budget, verifies, switches or not, and the owner reads it the next morning in `specd status`
and `specd history --events`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest

from specd.context import seams_for
from specd.profiles.load import load_profile
from specd.tune.bench import DeploymentTarget, Settings, run_bench
from specd.tune.workloads import Workload, WorkloadRequest, filler_text
from tests.conftest import Box
from tests.system.daemon_rig import RunningDaemon, real_stack
from tests.system.night_rig import (
    Conversation,
    NightEvent,
    Sent,
    cron_in,
    expected_mix,
    generations,
    send_mix,
    tiny_mix,
    tuner_table,
    wait_for_night,
)
from tests.system.test_bench import CODE_ASK, emulated_profiles

LABEL = "temperature=0.7,top_p=0.9"  # what tiny_mix samples with, as the history labels it


def started_daemon(box: Box, start_daemon: Callable[..., RunningDaemon], *, capture: bool, fire_in_s: float,
                   idle_s: float, budget_minutes: float, n: int, candidates: list[str]) -> tuple[RunningDaemon, float]:
    cron, fire_at = cron_in(fire_in_s)
    daemon = start_daemon(capture=capture,
                          tuner=tuner_table(cron, idle_s=idle_s, budget_minutes=budget_minutes, n=n,
                                            candidates=candidates))
    return daemon, fire_at


def utc(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def bench_generations(box: Box, since: float) -> list[dict[str, Any]]:
    """The switches the nightly run made (its bench's steps, trigger "bench", and a winner's, "tuner"), oldest first."""
    return sorted((g for g in generations(box.unit)
                   if g["trigger"] in ("bench", "tuner") and utc(g["created_at"]) >= since),
                  key=lambda g: int(g["id"]))


def morning(box: Box) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    status = json.loads(box.specd("status", "--json", check=True).stdout)
    events = json.loads(box.specd("history", "--events", "--json", check=True).stdout)
    return status, events


def check_the_night_was_recorded(box: Box, event: NightEvent, sent: Sent, live: str, *, idle_s: float,
                                 fire_at: float, budget_minutes: float) -> None:
    """What every night must show: fired inside the would-be idle window, it waited for the window to
    close before benching, kept to the budget, ended where it said, and the morning sees it."""
    numbers = event.numbers
    assert numbers["trigger"] == "tuner" and numbers["budget_s"] == 60.0 * budget_minutes
    assert sent.started_at < fire_at < sent.ended_at + idle_s, "the night fires after the traffic began and " \
                                                               "before it has been idle long enough"
    benched_from = fire_at + numbers["waited_idle_s"]  # the bench starts as the wait ends
    assert numbers["waited_idle_s"] > 0.0 and benched_from >= sent.ended_at + idle_s - 1.0, (numbers, sent.ended_at)
    assert numbers["bench_s"] <= numbers["budget_s"]
    status, events = morning(box)
    assert (status["last_tune"]["kind"], status["last_tune"]["reason"]) == ("tune", event.sentence), status["last_tune"]
    assert events[0]["kind"] == "tune" and events[0]["detail"].startswith(event.sentence)
    assert status["active_profile"] == (numbers["best"] if numbers["switched"] else live)


# --- the real tiny model --------------------------------------------------------------------------------


@real_stack
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("capture", [True, False], ids=["capture", "no-capture"])
def test_a_real_night_benches_what_the_proxy_recorded(box: Box, start_daemon: Callable[..., RunningDaemon],
                                                      capture: bool) -> None:
    box.edit_profile("base", parallel=2)
    box.specd("switch", "autoregressive", check=True)
    idle_s, budget = 18.0, 20.0  # the budget binds nothing here (max_n = 4n does); it lets a loaded box finish
    daemon, fire_at = started_daemon(box, start_daemon, capture=capture, fire_in_s=12.0, idle_s=idle_s,
                                     budget_minutes=budget, n=4, candidates=["autoregressive", "ngram-simple"])
    mix = tiny_mix()
    sent = send_mix(daemon.proxy_url, mix, concurrency=2)
    assert not sent.failures and len(sent.statuses) == 14

    event = wait_for_night(box.unit, lambda what, cond, t: daemon.wait_for(what, cond, t), 1500.0)
    assert event.kind == "tune", f"{event}\n--- daemon log ---\n{daemon.log()}"
    traffic = event.numbers["traffic"]
    # The levels the proxy recorded (2 clients: 2 in flight, 1 at the start and the end) are what is
    # replayed; a resampled synthetic workload may draw more of the 1s, so its median can be 1.
    assert set(traffic["concurrency_levels"]) <= {"1", "2"} and "2" in traffic["concurrency_levels"], traffic
    assert traffic["concurrency"] == 2 or not capture, traffic
    assert traffic["sampling"] == {LABEL: traffic["size"]}
    assert set(traffic["class_mix"]) <= set(expected_mix(mix))
    if capture:
        assert traffic["source"] == "captured" and traffic["size"] == 14
        assert traffic["class_mix"] == dict(expected_mix(mix)) and traffic["follow_ups"] == 1
        assert traffic["cache_reuse"] is True
    else:
        assert traffic["source"] == "synthetic" and traffic["size"] >= 16
    check_the_night_was_recorded(box, event, sent, "autoregressive", idle_s=idle_s, fire_at=fire_at,
                                 budget_minutes=budget)
    if event.numbers["switched"]:
        assert event.numbers["verify"][event.numbers["best"]] == "ok"


@real_stack
@pytest.mark.timeout(1800)
def test_clients_arriving_mid_bench_stop_the_night_and_see_latency_not_errors(
        box: Box, start_daemon: Callable[..., RunningDaemon]) -> None:
    box.edit_profile("base", parallel=2)
    box.specd("switch", "autoregressive", check=True)
    daemon, fire_at = started_daemon(box, start_daemon, capture=False, fire_in_s=12.0, idle_s=14.0,
                                     budget_minutes=20.0, n=40, candidates=["autoregressive", "ngram-simple"])
    assert not send_mix(daemon.proxy_url, tiny_mix(), concurrency=2).failures

    daemon.wait_for("the night's bench to switch to ngram-simple",
                    lambda: any(g["profile"] == "ngram-simple" and g["outcome"] == "ok"
                                for g in bench_generations(box, fire_at - 1.0)), 1200.0)
    morning_rush = [Conversation((f"Write a Python function that adds {k} to a number.",), 16) for k in range(8)]
    arrived = time.time()
    sent = send_mix(daemon.proxy_url, morning_rush, concurrency=2, stream_every=2)
    assert sent.failures == [] and sent.statuses == [200] * 8, sent.failures

    event = wait_for_night(box.unit, lambda what, cond, t: daemon.wait_for(what, cond, t), 180.0)
    assert event.kind == "tune-stopped", f"{event}\n--- daemon log ---\n{daemon.log()}"
    numbers = event.numbers
    assert numbers["live"] == numbers["now_on"] == "autoregressive"
    assert numbers["restore_s"] <= numbers["hold_timeout_s"] == 120.0
    assert event.sentence.endswith("no decision") and "autoregressive put back" in event.sentence
    status = json.loads(box.specd("status", "--json", check=True).stdout)
    assert status["active_profile"] == "autoregressive" and status["last_tune"]["reason"] == event.sentence
    assert max(sent.latencies_s) < 120.0 and time.time() - arrived < 180.0
    rows = json.loads(box.specd("traffic", "--json", "--since", "10m", check=True).stdout)
    assert rows["failed"] == 0, rows


# --- the performance emulator: where concurrency changes the right answer ------------------------------


EMULATOR_SCALE = 0.1  # a modelled 10 s request takes 1 s: long enough that 8 clients really overlap


def code_mix(count: int) -> list[Conversation]:
    return [Conversation((f"Reference material:\n{filler_text(480, seed)}\n\n{CODE_ASK}",), 256)
            for seed in range(count)]


def exhaustive_best(box: Box, concurrency: int, candidates: list[str]) -> tuple[str, dict[str, float]]:
    """Every candidate, every request of the generator's mix at its concurrency, no early stop: the truth."""
    workload = Workload("truth", tuple(
        WorkloadRequest(body={"messages": [{"role": "user", "content": c.asks[0]}], "max_tokens": c.max_tokens},
                        task_class="code") for c in code_mix(8)))
    target = DeploymentTarget(box.deployment, seams=seams_for, trigger="bench")
    try:
        report = run_bench(target, candidates, workload, Settings(n=24, concurrency=concurrency, early_stop=False))
    finally:
        target.close()
    medians = {p: report.summary(p).median for p in report.benched()}
    return min(medians, key=lambda p: medians[p]), medians


@pytest.mark.systemd
@pytest.mark.parametrize(("capture", "concurrency"), [(True, 1), (True, 8), (False, 1), (False, 8)],
                         ids=["capture-c1", "capture-c8", "no-capture-c1", "no-capture-c8"])
def test_the_nights_pick_matches_the_exhaustive_best_on_the_emulator(
        box: Box, start_daemon: Callable[..., RunningDaemon], capture: bool, concurrency: int) -> None:
    candidates = ["plain", "mtp"]
    emulated_profiles(box, tuple(candidates), time_scale=EMULATOR_SCALE)
    box.edit_profile("base", parallel=8)
    for name in candidates:
        load_profile(box.profiles_dir, name)
    box.specd("switch", "plain", check=True)
    truth, medians = exhaustive_best(box, concurrency, candidates)
    idle_s, budget = 15.0, 3.0
    daemon, fire_at = started_daemon(box, start_daemon, capture=capture, fire_in_s=12.0, idle_s=idle_s,
                                     budget_minutes=budget, n=16, candidates=candidates)
    sent = send_mix(daemon.proxy_url, code_mix(48 if concurrency > 1 else 10), concurrency=concurrency,
                    model="tiny")
    assert not sent.failures, sent.failures

    event = wait_for_night(box.unit, lambda what, cond, t: daemon.wait_for(what, cond, t), 240.0)
    assert event.kind == "tune", f"{event}\n--- daemon log ---\n{daemon.log()}"
    numbers = event.numbers
    print(f"\nexhaustive medians at concurrency {concurrency}: {medians}; the night: {event.sentence}; "
          f"traffic {numbers['traffic']}")
    assert numbers["traffic"]["source"] == ("captured" if capture else "synthetic")
    assert numbers["traffic"]["concurrency"] == concurrency
    check_the_night_was_recorded(box, event, sent, "plain", idle_s=idle_s, fire_at=fire_at, budget_minutes=budget)
    pick = json.loads(box.specd("status", "--json", check=True).stdout)["active_profile"]
    assert pick == truth, (event.sentence, medians)
    if truth == "mtp":
        assert numbers["verify"] == {"mtp": "ok"}, "the switch was gated on verify"



@pytest.mark.systemd
def test_the_budget_ends_the_nights_bench(box: Box, start_daemon: Callable[..., RunningDaemon]) -> None:
    """A bench that would take minutes stops starting requests once the budget (from the firing) is spent."""
    candidates = ["plain", "mtp"]
    emulated_profiles(box, tuple(candidates), time_scale=EMULATOR_SCALE)
    box.specd("switch", "plain", check=True)
    idle_s, budget = 15.0, 1.0
    daemon, fire_at = started_daemon(box, start_daemon, capture=False, fire_in_s=12.0, idle_s=idle_s,
                                     budget_minutes=budget, n=400, candidates=candidates)
    sent = send_mix(daemon.proxy_url, code_mix(8), concurrency=1)
    assert not sent.failures, sent.failures

    event = wait_for_night(box.unit, lambda what, cond, t: daemon.wait_for(what, cond, t), 240.0)
    assert event.kind == "tune", f"{event}\n--- daemon log ---\n{daemon.log()}"
    numbers = event.numbers
    assert any(note.startswith("the time budget was spent in round 1 of ") for note in numbers["notes"]), numbers
    longest_request_s = 2.0  # a modelled code request at time scale 0.1 takes about 1 s
    assert numbers["waited_idle_s"] + numbers["bench_s"] <= numbers["budget_s"] + longest_request_s, numbers
    check_the_night_was_recorded(box, event, sent, "plain", idle_s=idle_s, fire_at=fire_at, budget_minutes=budget)
