"""The nightly run's pieces: when it fires, the idle wait within the budget, the stop when clients come back."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from specd import paths
from specd.clock import SYSTEM_CLOCK, Clock
from specd.daemon.nightly import cron_trigger
from specd.deploy.history import History
from specd.deploy.seams import Seams
from specd.emulator.model import load_model
from specd.errors import ConfigError, Interrupted
from specd.profiles.config import Config, Deployment, TunerConfig
from specd.traffic import records as traffic
from specd.tune.bench import ModelTarget, Settings
from specd.tune.night import TrafficWatch, nightly, wait_for_idle
from specd.tune.pins import set_pin
from specd.tune.targets import Interruptible, Reply
from specd.tune.tuner import tune
from specd.tune.workloads import load_workload

UNIT = "llama.service"


def no_switch_expected(deployment: Deployment) -> Seams:
    raise AssertionError(f"the night must not touch {deployment.unit} when it skips")


class VirtualClock:
    """Time that passes only when the code under test sleeps (wall time starts at the real now)."""

    def __init__(self) -> None:
        self.offset = 0.0
        self.slept: list[float] = []
        self.start = time.time()

    def clock(self) -> Clock:
        return self

    def time(self) -> float:
        return self.start + self.offset

    def monotonic(self) -> float:
        return self.offset

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.offset += seconds


@pytest.fixture
def deployment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Deployment:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return Deployment(unit=UNIT, scope="user", profiles_dir=tmp_path)


def ended(seconds_ago: float, now: float) -> None:
    conn = traffic.open_db()
    traffic.insert_records(conn, [traffic.TrafficRecord(ts=now - seconds_ago - 2.0, endpoint="/v1/chat/completions",
                                                        stream=False, status=200, total_ms=2000.0, unit=UNIT)])
    conn.close()


def test_the_cron_takes_five_fields_or_six_with_seconds_and_names_the_file_when_wrong() -> None:
    start = datetime.now().astimezone().replace(microsecond=0)
    nightly_at = cron_trigger("30 3 * * *", None).get_next_fire_time(None, start)
    assert nightly_at is not None and (nightly_at.hour, nightly_at.minute, nightly_at.second) == (3, 30, 0)
    soon = start + timedelta(seconds=20)
    exact = cron_trigger(f"{soon.second} {soon.minute} {soon.hour} * * *", None).get_next_fire_time(None, start)
    assert exact == soon
    with pytest.raises(ConfigError, match=r"specd\.toml: \[tuner\] cron '61 \* \* \* \*'"):
        cron_trigger("61 * * * *", Path("/etc/specd.toml"))


def test_the_run_waits_for_the_idle_window_when_traffic_ended_recently(deployment: Deployment) -> None:
    virtual = VirtualClock()
    ended(20.0, virtual.start)
    wait = wait_for_idle(deployment, 60.0, deadline=600.0, clients=lambda: (5, 0), clock=virtual.clock())
    assert wait.idle and 40.0 <= wait.waited_s <= 46.0 and sum(virtual.slept) == wait.waited_s


def test_clients_seen_on_the_proxy_keep_it_waiting_before_their_rows_are_written(deployment: Deployment) -> None:
    """No traffic rows at all: what the proxy shows (a request in flight, then one more accepted) is enough."""
    virtual = VirtualClock()
    looks = iter([(10, 1), (10, 1), (11, 0)])

    def clients() -> tuple[int, int]:
        return next(looks, (11, 0))  # two looks with one in flight, then one more accepted and answered

    wait = wait_for_idle(deployment, 30.0, deadline=600.0, clients=clients, clock=virtual.clock())
    assert wait.idle and wait.waited_s >= 30.0 + 2 * 5.0


def test_it_gives_up_when_the_budget_cannot_hold_the_idle_window(deployment: Deployment) -> None:
    virtual = VirtualClock()
    ended(5.0, virtual.start + virtual.offset)
    gave_up = wait_for_idle(deployment, 30.0, deadline=virtual.offset + 10.0, clients=lambda: (0, 0),
                            clock=virtual.clock())
    assert not gave_up.idle and gave_up.last_age_s is not None and gave_up.last_age_s < 30.0
    assert gave_up.waited_s == 0.0, "it does not sleep when the window cannot fit in what is left"


def test_the_night_records_why_it_skipped(deployment: Deployment) -> None:
    config = Config(path=None, deployments=(deployment,), tuner=TunerConfig(idle_minutes=30.0, budget_minutes=10.0))
    virtual = VirtualClock()
    ended(60.0, virtual.start)
    assert nightly(config, deployment, seams=no_switch_expected, clients=lambda: (0, 0), clock=virtual.clock()) is None
    event = History(paths.db_path()).events(UNIT)[0]
    sentence, numbers = event["detail"].split(" | ")
    assert event["kind"] == "tune-skip" and sentence.startswith("no idle window within the budget: the last "
                                                                 "request ended 60 s ago")
    assert json.loads(numbers) == {"budget_s": 600.0, "idle_s": 1800.0, "waited_idle_s": 0.0}
    set_pin(UNIT, "plain")
    assert nightly(config, deployment, seams=no_switch_expected, clock=virtual.clock()) is None
    assert History(paths.db_path()).events(UNIT)[0]["detail"].startswith("pinned to plain")


@pytest.mark.parametrize("arrival", [(8, 1), (9, 0)], ids=["in-flight", "already-answered"])
def test_the_watch_sees_the_first_client_request(arrival: tuple[int, int]) -> None:
    now = [(8, 0)]
    with TrafficWatch(lambda: now[0], SYSTEM_CLOCK, poll_s=0.01) as watch:
        assert not watch.arrived.wait(0.1)
        now[0] = arrival
        assert watch.arrived.wait(5.0) and watch.seen_at is not None


class StoppedMidBench(ModelTarget):
    """The emulator's model in-process; the stop is set (as the watch would) after `after` requests."""

    def __init__(self, stop: threading.Event, after: int) -> None:
        super().__init__(load_model(), {"plain": "none", "mtp": "mtp"}, active="plain")
        self.stop, self.after, self.sent = stop, after, 0
        self.activated: list[str] = []

    def activate(self, profile: str) -> None:
        self.activated.append(profile)
        super().activate(profile)

    def complete(self, body: Mapping[str, Any], in_flight: int = 1) -> Reply:
        self.sent += 1
        if self.sent == self.after:
            self.stop.set()
        return super().complete(body, in_flight)


def test_a_stopped_bench_sends_nothing_more_and_ends_on_the_live_profile() -> None:
    stop = threading.Event()
    inner = StoppedMidBench(stop, after=5)
    with pytest.raises(Interrupted, match="clients sent requests"):
        tune(Interruptible(inner, stop), ["plain", "mtp"], load_workload("code"), Settings(n=12, per_round=3))
    assert inner.sent == 5, "no request after the stop"
    assert inner.active() == "plain" and inner.activated[-1] == "plain"


def test_a_switch_asked_for_after_the_stop_puts_the_live_profile_back_instead() -> None:
    stop = threading.Event()
    inner = StoppedMidBench(stop, after=0)
    target = Interruptible(inner, stop)
    target.activate("mtp")  # the bench's switch, before the clients came
    stop.set()
    with pytest.raises(Interrupted):
        target.activate("mtp")  # e.g. the switch to a winner decided a moment before
    assert inner.active() == "plain" and inner.activated == ["mtp", "plain"]
    with pytest.raises(Interrupted):
        target.complete({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})


def test_the_night_sweeps_only_a_live_profile_that_speculates_and_says_why_not(deployment: Deployment) -> None:
    from specd.tune.night import Night, _sweep_base

    profiles = deployment.profiles_dir
    (profiles / "plain.toml").write_text('binary = "/opt/llama-server"\nmodel = "/models/m.gguf"\nalias = "m"\n'
                                         'port = 8080\n')
    (profiles / "mtp.toml").write_text('inherits = "plain"\n[speculative]\ntype = "mtp"\n')
    (profiles / "broken.toml").write_text('inherits = "plain"\n[speculative\n')
    sweeping = Config(path=profiles / "specd.toml", deployments=(deployment,),
                      tuner=TunerConfig(sweep=("draft_n_max=2..4",)))

    def base(config: Config, live: str | None) -> tuple[str | None, object]:
        night = Night(fired_at=0.0, budget_s=60.0)
        return _sweep_base(config, deployment, live, night), night.numbers.get("sweep")

    assert base(sweeping, "mtp") == ("mtp", None)
    assert base(Config(path=sweeping.path, deployments=(deployment,)), "mtp") == (None, None)  # no [tuner] sweep
    assert base(sweeping, "plain") == (None, ('skipped: plain does not speculate (type = "none"); '
                                              'compared the candidates'))
    assert base(sweeping, None) == (None, "skipped: no profile is active to sweep")
    skipped, why = base(sweeping, "broken")
    assert skipped is None and str(why).startswith("skipped: broken does not load: ") and "line 2" in str(why)


def test_the_daemon_gets_the_nightly_run_and_the_pins_check_from_the_composition_root(deployment: Deployment) -> None:
    """The daemon sits below the tuner and never imports it: `specd daemon` hands it these jobs
    (specd.context.tuner_jobs). Run as the daemon runs them, they do the tuner's work."""
    from specd import context

    jobs = context.tuner_jobs()
    assert jobs.nightly is not None and jobs.schedule is not None
    config = Config(path=None, deployments=(deployment,), tuner=TunerConfig(idle_minutes=30.0, budget_minutes=10.0))
    set_pin(UNIT, "plain")
    jobs.nightly(config, deployment, lambda: (0, 0), no_switch_expected)()
    assert History(paths.db_path()).events(UNIT)[0]["detail"].startswith("pinned to plain")
    assert jobs.schedule(deployment, no_switch_expected)() is None  # an all-day pin holds everything
