"""Time-of-day pins on the real stack: `specd pin NAME --period P` for the period now in force makes the
running daemon switch the real llama-server to NAME (over systemd, through the health gate, its proxy
draining), `specd status` shows the pin, and `specd unpin --period P` brings back the profile chosen
before. Period boundaries themselves are crossed with a moved clock in tests/unit/test_schedule.py."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

from specd.tune.periods import PERIODS, period_of
from tests.conftest import Box
from tests.system.daemon_rig import real_stack


def period_with_room(room_s: float = 120.0) -> str:
    """The period now, once at least `room_s` remain before the next one begins (waits past a boundary)."""
    now = time.localtime()
    hour_end = next(hi for _, lo, hi in PERIODS if lo <= now.tm_hour < hi)
    left_s = (hour_end - now.tm_hour) * 3600 - now.tm_min * 60 - now.tm_sec
    if left_s < room_s:
        time.sleep(left_s + 1)
    return period_of(time.time())


@real_stack
def test_a_pin_for_the_time_of_day_switches_the_live_server_and_its_removal_switches_back(
        box: Box, start_daemon: Any) -> None:
    box.specd("switch", "autoregressive", check=True)
    daemon = start_daemon(daemon_extra="schedule_check_s = 1")
    period = period_with_room()
    box.specd("pin", "ngram-simple", "--period", period, check=True)

    def active() -> str | None:
        profile: str | None = json.loads(box.specd("status", "--json").stdout)["active_profile"]
        return profile

    def newest() -> tuple[str | None, str, str]:
        generation = box.history().list(box.unit, limit=1)[0]
        return generation.profile, generation.trigger, generation.outcome

    daemon.wait_for("the scheduled switch", lambda: newest() == ("ngram-simple", "schedule", "ok"), timeout_s=120)
    assert active() == "ngram-simple"
    status = box.specd("status")
    assert status.returncode == 0, status.stdout + status.stderr
    assert f"{period} ngram-simple" in " ".join(status.stdout.split())
    facts = json.loads(box.specd("status", "--json").stdout)
    assert facts["schedule"] == {period: "ngram-simple"}
    answer = httpx.post(f"{daemon.proxy_url}/completion", json={"prompt": "The capital of France is",
                                                                "n_predict": 4}, timeout=60)
    assert answer.status_code == 200  # the alias answers on the scheduled profile, through the proxy

    box.specd("unpin", "--period", period, check=True)
    daemon.wait_for("the switch back", lambda: newest() == ("autoregressive", "schedule", "ok"), timeout_s=120)
    events = [e for e in box.history().events(box.unit) if e["kind"] == "schedule"]
    assert (len(events) == 2 and "was removed" in events[0]["detail"]
            and "switched to autoregressive" in events[0]["detail"])
    time.sleep(3)  # three more checks: nothing changed, so nothing moves
    assert active() == "autoregressive" and len(box.history().list(box.unit, limit=50)) == 3
