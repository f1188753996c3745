"""The status page in a real headless Chromium, served by the real daemon (a Type=notify user unit
on the private systemd) in front of the real llama-server and tiny model: it shows the active
profile, refuses a switch without the token and changes nothing, switches for real with it — the
live gate steps and the timeline update without a reload — runs "Bench now" on the real server,
shows a rollback made on the command line live too, logs no console error, and shows its state
within a second of being opened. SPECD_SCREENSHOTS=DIR keeps the screenshots and the load times
(docs/ holds a run's)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from specd.setup.sandbox import free_port
from specd.unit.render import profile_of_unit
from tests.conftest import Box
from tests.system.browser import chromium, console_errors, screenshot
from tests.system.daemon_rig import chat, real_stack

WAIT_S = 120


def text_of(driver: Any, element_id: str) -> str:
    return str(driver.find_element(By.ID, element_id).text)


def wait(driver: Any, what: str, condition: Any, timeout_s: float = WAIT_S) -> Any:
    """Poll `condition(driver)`; the page re-renders as events arrive, so a stale element is retried."""
    return WebDriverWait(driver, timeout_s, poll_frequency=0.2, ignored_exceptions=(StaleElementReferenceException,)
                         ).until(lambda d: condition(d), message=f"timed out waiting for {what}")


def step_names(driver: Any) -> list[str]:
    names: list[str] = driver.execute_script(
        "return [...document.querySelectorAll('#steps li')].map(li => li.dataset.step)")
    return names


def first_timeline_entry(driver: Any) -> str:
    text: str = driver.execute_script("const li = document.querySelector('#timeline li'); "
                                      "return li ? li.innerText : ''")
    return text


def generations(box: Box) -> list[Any]:
    history = box.history()
    try:
        return history.list(box.unit, 100)
    finally:
        history.close()


@real_stack
@pytest.mark.own_threads
def test_the_page_switches_the_real_server_live_and_refuses_without_the_token(
        box: Box, start_daemon: Any, tmp_path: Path) -> None:
    box.specd("switch", "autoregressive", check=True)
    port = free_port()
    workload = tmp_path / "short.jsonl"
    workload.write_text("".join(json.dumps({
        "messages": [{"role": "user", "content": f"Repeat exactly: def f{i}(x):\n    return x + {i}\n"}],
        "max_tokens": 24, "specd": {"task_class": "code"}}) + "\n" for i in range(3)))
    tuner = (f'enabled = false\nn = 3\nmax_n = 12\nworkload = "{workload}"\n'
             'candidates = ["autoregressive", "ngram-simple"]\n')  # "Bench now": short, on the real server
    daemon = start_daemon(daemon_extra=f'http_listen = "127.0.0.1:{port}"\n', tuner=tuner)
    url = f"http://127.0.0.1:{port}/"
    for _ in range(3):  # some traffic for the page's traffic section
        assert httpx.post(f"{daemon.proxy_url}/v1/chat/completions", json=chat(False), timeout=120).status_code == 200
    token = box.specd("web-token", check=True).stdout.splitlines()[0]
    token_file = daemon.state_dir / "web-token"
    assert token_file.read_text().strip() == token and token_file.stat().st_mode & 0o777 == 0o600

    with chromium(tmp_path / "chromium") as driver:
        driver.get(url)  # the browser's first page: it starts its renderer, which is not the page's time
        wait(driver, "the page to show the active profile", lambda d: text_of(d, "active-profile") == "autoregressive")
        first_ms = int(driver.find_element(By.TAG_NAME, "body").get_attribute("data-loaded-ms") or 0)
        wait(driver, "every section",
             lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-loaded") == "all")
        driver.get(url)  # opened again in the running browser, as a user would
        wait(driver, "the page to show the active profile", lambda d: text_of(d, "active-profile") == "autoregressive")
        loaded_ms = int(driver.find_element(By.TAG_NAME, "body").get_attribute("data-loaded-ms") or 0)
        assert 0 < loaded_ms < 1000, f"the page showed its state after {loaded_ms} ms (first open: {first_ms} ms)"
        wait(driver, "every section",
             lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-loaded") == "all")
        assert console_errors(driver) == []

        # Without the token: the click reaches the daemon, which refuses; nothing changes.
        before = generations(box)
        unit_text = box.unit_path.read_text()
        Select(driver.find_element(By.ID, "profile-select")).select_by_value("ngram-simple")
        driver.find_element(By.ID, "switch").click()
        message = wait(driver, "the refusal", lambda d: "read-only" in text_of(d, "action-message")
                       and text_of(d, "action-message"))
        assert "specd web-token" in message
        refused = console_errors(driver)
        assert all("/api/action" in e["message"] and "403" in e["message"] for e in refused), refused
        assert generations(box) == before and box.unit_path.read_text() == unit_text
        assert text_of(driver, "active-profile") == "autoregressive"

        # With the token: log in, click, watch the gate steps and the timeline arrive without a reload.
        driver.execute_script("window.specdTestMarker = 'no reload'")
        driver.find_element(By.ID, "token").send_keys(token)
        driver.find_element(By.ID, "login-button").click()
        wait(driver, "the session", lambda d: d.find_element(By.ID, "session").is_displayed())
        Select(driver.find_element(By.ID, "profile-select")).select_by_value("ngram-simple")
        driver.find_element(By.ID, "switch").click()
        try:
            steps = wait(driver, "the gate steps and the commit",
                         lambda d: "commit" in (names := step_names(d)) and names)
        except TimeoutException:
            raise AssertionError(f"steps seen: {step_names(driver)}; message: {text_of(driver, 'action-message')}; "
                                 f"live: {text_of(driver, 'live')}\n--- daemon log ---\n{daemon.log()}") from None
        for step in ("preflight", "intent", "backup", "write", "reload", "restart", "gate-health", "gate-completion",
                     "gate-stable", "gate", "commit"):
            assert step in steps, steps
        assert steps.index("gate-health") < steps.index("gate-stable") < steps.index("commit")
        wait(driver, "the active profile to change", lambda d: text_of(d, "active-profile") == "ngram-simple")
        wait(driver, "the timeline's new switch", lambda d: all(
            word in first_timeline_entry(d) for word in ("ngram-simple", "switch", "ok", "by web")))
        assert "switched: profile ngram-simple is healthy" in text_of(driver, "action-message")
        assert driver.execute_script("return window.specdTestMarker") == "no reload"
        assert console_errors(driver) == []

        newest = generations(box)[0]
        assert (newest.profile, newest.kind, newest.trigger, newest.outcome) == ("ngram-simple", "switch", "web", "ok")
        assert profile_of_unit(box.unit_path.read_text()) == "ngram-simple"
        answer = httpx.post(f"{daemon.proxy_url}/v1/chat/completions", json=chat(False), timeout=120)
        assert answer.status_code == 200

        # The new generation's unit diff is on the page, against the one before.
        diff = driver.find_element(By.CSS_SELECTOR, "#timeline li details pre").get_attribute("textContent") or ""
        assert "+" in diff and "ngram-simple" in diff

        # Bench now: the tuner's bench and decision on the real server, shown without a reload; no switch.
        driver.find_element(By.ID, "bench").click()
        wait(driver, "the bench's result", lambda d: "Run " in text_of(d, "bench-summary"), timeout_s=600)
        rows = driver.execute_script("return document.querySelectorAll('#bench-table tr').length")
        assert rows == 3, text_of(driver, "bench-table")  # a header and the two candidates
        assert "tune-dry-run" in text_of(driver, "timeline")
        assert profile_of_unit(box.unit_path.read_text()) == "ngram-simple"  # a dry run: back where it was
        assert driver.execute_script("return window.specdTestMarker") == "no reload"
        assert console_errors(driver) == []

        # A rollback from the command line shows live on the page too (the CLI tells the daemon its steps).
        box.specd("rollback", check=True)
        wait(driver, "the command line's steps", lambda d: "command line" in text_of(d, "live-title")
             and "commit" in step_names(d))
        wait(driver, "the rolled-back profile", lambda d: text_of(d, "active-profile") == "autoregressive")
        wait(driver, "the timeline's rollback", lambda d: all(
            word in first_timeline_entry(d) for word in ("rollback", "autoregressive", "ok", "by cli")))
        assert driver.execute_script("return window.specdTestMarker") == "no reload"
        assert console_errors(driver) == []

        keep = os.environ.get("SPECD_SCREENSHOTS")
        shots = Path(keep) if keep else tmp_path / "shots"
        (shots / "status-page-load.json").parent.mkdir(parents=True, exist_ok=True)  # for benchmarks/results/
        (shots / "status-page-load.json").write_text(json.dumps(
            {"first_open_ms": first_ms, "opened_again_ms": loaded_ms, "measure": "performance.now() when the "
             "deployment card was filled from /api/state"}) + "\n")
        desktop = screenshot(driver, shots / "status-page-desktop.png", width=1280)
        phone = screenshot(driver, shots / "status-page-phone.png", width=390, mobile=True)
        assert desktop.stat().st_size > 10_000 and phone.stat().st_size > 10_000
        assert console_errors(driver) == []
