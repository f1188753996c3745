"""The control socket's work on a real Proxy object: a drain holds clients only for the slot that
serves, and a blue-green retarget moves the backend without holding anyone. The servers behind
the proxy are a FAKE HTTP transport; the slot pointer and unit files are real files."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from specd.daemon.steering import ProxySteering, backend_of
from specd.deploy.slots import companion_unit, slot, write_pointer
from specd.paths import StateDir
from specd.profiles.config import Deployment, ProxyConfig
from specd.proxy.proxy import Proxy, ProxySettings
from specd.setup.sandbox import free_port
from specd.unit.render import exec_start_line

UNIT = "llama-test.service"


def unit_text(profile: str, port: int) -> str:
    argv = ["/opt/llama-server", "-m", f"/m/{profile}.gguf", "--alias", "tiny", "--port", str(port)]
    return f"# specd-profile: {profile}\n[Service]\nExecStart={exec_start_line(argv)}\n"


@pytest.fixture
def rig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Deployment, StateDir]:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    deployment = Deployment(UNIT, "user", tmp_path / "profiles", proxy=ProxyConfig())
    blue, green = slot(deployment, "blue"), slot(deployment, "green")
    blue.unit_path.parent.mkdir(parents=True)
    blue.unit_path.write_text(unit_text("old", 8081))
    green.unit_path.write_text(unit_text("new", 8082))
    return deployment, StateDir(tmp_path / "state")


def test_the_backend_follows_the_slot_pointer(rig: tuple[Deployment, StateDir]) -> None:
    deployment, state = rig
    backend = backend_of(deployment, state)
    assert (backend.url, backend.profile) == ("http://127.0.0.1:8081", "old")
    write_pointer(state, deployment, "green")
    backend = backend_of(deployment, state)
    assert (backend.url, backend.profile) == ("http://127.0.0.1:8082", "new")


def test_a_drain_of_the_slot_that_does_not_serve_holds_nobody(rig: tuple[Deployment, StateDir]) -> None:
    deployment, state = rig

    async def scenario() -> tuple[bool, bool]:
        proxy = Proxy(ProxySettings(unit=UNIT), lambda: backend_of(deployment, state))
        steering = ProxySteering(state, {UNIT: (deployment, proxy)})
        await steering.drain(companion_unit(UNIT), 1.0, 5.0)  # green does not serve
        not_serving = proxy.paused
        await steering.drain(UNIT, 1.0, 5.0)  # blue serves: clients are held
        serving = proxy.paused
        steering.resume(UNIT)
        proxy.gate.stop()
        return not_serving, serving

    assert asyncio.run(scenario()) == (False, True)


def test_a_retarget_moves_the_backend_without_holding_anyone(rig: tuple[Deployment, StateDir],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    deployment, state = rig
    real_client = httpx.AsyncClient

    def fake_servers(**kwargs: object) -> httpx.AsyncClient:
        return real_client(transport=httpx.MockTransport(lambda request: httpx.Response(200, json={"status": "ok"})))

    monkeypatch.setattr("specd.daemon.steering.httpx.AsyncClient", fake_servers)

    async def scenario() -> tuple[str, bool, bool]:
        proxy = Proxy(ProxySettings(unit=UNIT), lambda: backend_of(deployment, state))
        steering = ProxySteering(state, {UNIT: (deployment, proxy)})
        write_pointer(state, deployment, "green")
        answer = await steering.retarget(UNIT, 2.0)
        assert answer is not None
        return proxy.backend.url, bool(answer["retargeted"]), proxy.gate.healthy and not proxy.paused

    assert asyncio.run(scenario()) == ("http://127.0.0.1:8082", True, True)


def test_a_retarget_to_a_server_that_does_not_answer_leaves_it_to_the_gate(rig: tuple[Deployment, StateDir]) -> None:
    deployment, state = rig
    slot(deployment, "green").unit_path.write_text(unit_text("new", free_port()))  # nothing listens there

    async def scenario() -> tuple[bool, bool]:
        proxy = Proxy(ProxySettings(unit=UNIT, health_poll_s=0.01), lambda: backend_of(deployment, state))
        steering = ProxySteering(state, {UNIT: (deployment, proxy)})
        write_pointer(state, deployment, "green")
        answer = await steering.retarget(UNIT, 0.3)
        held = not proxy.gate.healthy  # requests wait at the gate until the new backend answers
        await proxy.stop()
        assert answer is not None
        return bool(answer["retargeted"]), held

    retargeted, held = asyncio.run(scenario())
    assert retargeted is False and held is True
