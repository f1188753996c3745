"""The status page's HTTP side, served by uvicorn on loopback in a thread (no systemd: the unit is
not installed, so the page says so): read routes open to all, actions only with a session from
the token and its CSRF token, from the page's own origin, as JSON; the token file is 0600; an
address beyond loopback without a configured token file is refused; live events reach a stream."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from specd.daemon.service import bind_tcp, make_server
from specd.errors import ConfigError
from specd.profiles.config import load_config
from specd.setup.sandbox import free_port
from specd.tune.pins import get_pin, set_period_pin
from specd.web import auth
from specd.web.app import StatusPage

REPO = Path(__file__).resolve().parents[2]
UNIT = "web-test.service"


@dataclass
class Served:
    page: StatusPage
    url: str
    token: str
    config_path: Path

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=10.0)


def write_config(tmp_path: Path, listen: str, extra: str = "") -> Path:
    profiles = tmp_path / "profiles"
    if not profiles.exists():
        shutil.copytree(REPO / "profiles" / "tiny", profiles)
    path = tmp_path / "specd.toml"
    path.write_text(f'unit = "{UNIT}"\nprofiles_dir = "{profiles}"\n\n[daemon]\nhttp_listen = "{listen}"\n{extra}')
    return path


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    port = free_port()
    config = load_config(write_config(tmp_path, f"127.0.0.1:{port}"))
    loop = asyncio.new_event_loop()
    ran: list[Any] = []

    def submit(name: str, work: Any) -> None:  # the daemon's scheduler runs it in a worker; so do we
        thread = threading.Thread(target=work, name=name)
        ran.append(thread)
        thread.start()

    page = StatusPage(config, list(config.deployments), status=lambda: {"running": True, "units": {}},
                      submit=submit, loop=loop)
    server = make_server(page.app, host="127.0.0.1", port=port, grace_s=1)
    sock = bind_tcp("127.0.0.1", port)
    thread = threading.Thread(target=lambda: loop.run_until_complete(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    while not server.started:
        threading.Event().wait(0.02)
    token = (tmp_path / "state" / "specd" / "web-token").read_text().strip()
    try:
        yield Served(page, f"http://127.0.0.1:{port}", token, config.path)
    finally:
        page.close()
        server.should_exit = True
        thread.join(10)
        for worker in ran:
            worker.join(10)
        loop.close()


def login(client: httpx.Client, token: str) -> str:
    answer = client.post("/api/login", json={"token": token})
    assert answer.status_code == 200, answer.text
    csrf: str = answer.json()["csrf"]
    return csrf


def test_the_page_and_its_reads_need_no_token_and_ship_their_assets(served: Served) -> None:
    with served.client() as client:
        page = client.get("/")
        assert page.status_code == 200 and "<title>specd</title>" in page.text
        assert "default-src 'self'" in page.headers["content-security-policy"]
        for asset in ("/static/app.js", "/static/style.css"):
            assert client.get(asset).status_code == 200
        state = client.get("/api/state").json()
        card = state["deployments"][0]
        assert card["unit"] == UNIT and card["unit_state"] == "not installed" and card["active_profile"] is None
        assert {"autoregressive", "ngram-simple"} <= {p["name"] for p in card["profiles"]}
        assert client.get("/api/timeline").json() == []
        assert client.get("/api/traffic").json()["requests"] == 0
        assert client.get("/api/bench").json()["run"] is None
        assert client.get("/api/session").json() == {"authenticated": False, "csrf": None}


def test_the_token_file_is_private_and_refused_when_others_can_read_it(served: Served, tmp_path: Path) -> None:
    path = tmp_path / "state" / "specd" / "web-token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and len(served.token) >= 32
    assert auth.read_or_create_token(path) == served.token  # the next start reuses it
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        auth.read_or_create_token(path)


def test_an_action_without_a_session_is_refused_and_changes_nothing(served: Served) -> None:
    with served.client() as client:
        answer = client.post("/api/action", json={"unit": UNIT, "kind": "pin", "profile": "ngram-simple"})
        assert answer.status_code == 403 and "specd web-token" in answer.json()["error"]
        assert client.post("/api/login", json={"token": "not-the-token"}).status_code == 403
        assert client.get("/api/session").json()["authenticated"] is False
    assert get_pin(UNIT) is None


def test_a_session_without_the_csrf_token_or_from_another_origin_is_refused(served: Served) -> None:
    with served.client() as client:
        csrf = login(client, served.token)
        pin = {"unit": UNIT, "kind": "pin", "profile": "ngram-simple"}
        assert client.post("/api/action", json=pin).status_code == 403
        assert client.post("/api/action", json=pin, headers={"X-CSRF-Token": "forged"}).status_code == 403
        other = client.post("/api/action", json=pin, headers={"X-CSRF-Token": csrf, "Origin": "http://evil.example"})
        assert other.status_code == 403 and "evil.example" in other.json()["error"]
        form = client.post("/api/action", content=json.dumps(pin), headers={
            "X-CSRF-Token": csrf, "Content-Type": "text/plain"})
        assert form.status_code == 403
    assert get_pin(UNIT) is None


def test_with_the_token_and_the_csrf_token_pin_and_unpin_take_effect_and_are_streamed(served: Served) -> None:
    with served.client() as client, client.stream("GET", "/api/events") as events:
        csrf = login(client, served.token)
        assert client.get("/api/session").json() == {"authenticated": True, "csrf": csrf}
        headers = {"X-CSRF-Token": csrf, "Origin": served.url}
        answer = client.post("/api/action", json={"unit": UNIT, "kind": "pin", "profile": "ngram-simple"},
                             headers=headers)
        assert answer.status_code == 202 and answer.json()["action"]["state"] == "ok"
        pin = get_pin(UNIT)
        assert pin is not None and pin.profile == "ngram-simple"
        assert client.get("/api/state").json()["deployments"][0]["pin"]["profile"] == "ngram-simple"
        assert client.get("/api/state").json()["deployments"][0]["schedule"] == {}
        set_period_pin(UNIT, "evening", "autoregressive")  # as `specd pin autoregressive --period evening` does
        assert client.get("/api/state").json()["deployments"][0]["schedule"] == {"evening": "autoregressive"}
        seen = []
        for line in events.iter_lines():
            if line.startswith("data: "):
                seen.append(json.loads(line[6:]))
                if seen[-1].get("state") == "ok":
                    break
        assert [(e["event"], e["kind"], e["state"]) for e in seen] == [("action", "pin", "running"),
                                                                      ("action", "pin", "ok")]
        assert client.post("/api/action", json={"unit": UNIT, "kind": "unpin"}, headers=headers).status_code == 202
    assert get_pin(UNIT) is None


def test_bad_input_is_a_clear_400_naming_what(served: Served) -> None:
    with served.client() as client:
        headers = {"X-CSRF-Token": login(client, served.token)}
        missing = client.post("/api/action", json={"unit": UNIT, "kind": "switch", "profile": "nope"}, headers=headers)
        assert missing.status_code == 400 and "nope" in missing.json()["error"]
        unknown = client.post("/api/action", json={"unit": "other.service", "kind": "rollback"}, headers=headers)
        assert unknown.status_code == 400 and "other.service" in unknown.json()["error"]
        kind = client.post("/api/action", json={"unit": UNIT, "kind": "reboot"}, headers=headers)
        assert kind.status_code == 400 and "reboot" in kind.json()["error"]


def test_a_foreign_host_name_is_refused_on_loopback(served: Served) -> None:
    with served.client() as client:
        assert client.get("/api/state", headers={"Host": "rebound.example"}).status_code == 400


def test_an_address_beyond_loopback_needs_a_configured_token_file(tmp_path: Path) -> None:
    exposed = load_config(write_config(tmp_path, "0.0.0.0:8090"))
    with pytest.raises(ConfigError, match="http_token_file"):
        auth.check_exposure(exposed)
    configured = load_config(write_config(tmp_path, "0.0.0.0:8090", 'http_token_file = "web-token"\n'))
    auth.check_exposure(configured)
    assert configured.daemon.http_token_file == tmp_path / "web-token"


def test_the_daemon_refuses_to_start_on_an_exposed_address_without_a_token_file(tmp_path: Path) -> None:
    config = write_config(tmp_path, "0.0.0.0:8090")
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "config"),
           "SPECD_CONFIG": str(config), "PYTHONPATH": str(REPO)}
    started = subprocess.run([sys.executable, "-m", "specd", "daemon"], env=env, capture_output=True, text=True,
                             timeout=60, check=False)
    assert started.returncode == 2, started.stderr
    assert "0.0.0.0:8090 is reachable from other machines" in started.stderr and "Traceback" not in started.stderr
    assert not (tmp_path / "state" / "specd" / "web-token").exists()
