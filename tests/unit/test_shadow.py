"""The shadow bench over fakes: candidates start in the free slot and never touch the live one;
samples that ran beside live traffic are re-sent, marked, and never silently compared with clean
ones. The live and candidate servers are a FAKE HTTP transport; the service manager is FAKE
(tests/fakes/fake_slots.py); unit files, the slot pointer and history are real files."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from specd.deploy.capacity import Capacity
from specd.deploy.history import History
from specd.deploy.preflight import Preflight
from specd.deploy.seams import Seams
from specd.deploy.slots import companion_unit, read_pointer, slot
from specd.deploy.switch import Switcher
from specd.errors import PreflightError
from specd.gpu.gguf import GgufInfo
from specd.paths import StateDir
from specd.profiles.config import Deployment, ProxyConfig
from specd.profiles.load import load_profile
from specd.tune.bench import Report, Result, Settings, bench_profiles
from specd.tune.shadow import LoadMark, ShadowTarget, clean_only, load_notes
from specd.tune.workloads import Workload, WorkloadRequest
from specd.unit.render import exec_start_line
from tests.fakes.fake_slots import FakeGate, FakeSlotsSystemd
from tests.fakes.switch_world import profiles_dir_with

UNIT = "llama-test.service"
GREEN = companion_unit(UNIT)


def unit_text(profile: str, port: int = 8081) -> str:
    argv = ["/opt/llama-server", "-m", f"/m/{profile}.gguf", "--alias", "tiny", "--port", str(port)]
    return f"# specd-profile: {profile}\n[Service]\nExecStart={exec_start_line(argv)}\n"


@dataclass
class FakeServers:
    """FAKE HTTP: the live server's /slots (busy while `live_busy`), candidates' completions (the
    candidate's wall clock scripted per profile; `busy_during` makes live traffic arrive mid-sample)."""

    live_busy: threading.Event = field(default_factory=threading.Event)
    busy_during: int = 0  # the next N candidate requests see live traffic arrive while they run
    seen: list[str] = field(default_factory=list)
    live_requests: int = 0

    def handler(self, request: httpx.Request) -> httpx.Response:
        port = request.url.port
        if request.url.path == "/slots":
            return httpx.Response(200, json=[{"id": 0, "is_processing": self.live_busy.is_set()}])
        if request.url.path == "/metrics":
            return httpx.Response(404)
        if port == 8081:
            self.live_requests += 1
            return httpx.Response(200, json={"choices": [{"text": "live"}]})
        self.seen.append(f"{port}{request.url.path}")
        if self.busy_during:
            self.busy_during -= 1
            self.live_busy.set()
            time.sleep(0.2)  # long enough for the live-load poller to see it
            self.live_busy.clear()
        return httpx.Response(200, json={"choices": [{"message": {"content": "x"}}],
                                         "usage": {"prompt_tokens": 5, "completion_tokens": 4},
                                         "timings": {"prompt_n": 5, "prompt_ms": 1.0, "predicted_n": 4,
                                                     "predicted_ms": 2.0}})


@dataclass
class World:
    deployment: Deployment
    state: StateDir
    history: History
    systemd: FakeSlotsSystemd
    servers: FakeServers
    fits: Capacity = field(default_factory=lambda: Capacity(True, "fits (fake)"))

    def preflight(self, deployment: Deployment, name: str, *, current_main_pid: int = 0) -> Preflight:
        return Preflight(load_profile(deployment.profiles_dir, name), [], unit_text(name), GgufInfo.__new__(GgufInfo),
                         None)

    def seams(self) -> Seams:
        return Seams(self.deployment, self.state, self.history, connect=lambda: self.systemd,
                     http=lambda timeout_s: httpx.Client(transport=httpx.MockTransport(self.servers.handler)))

    def shadow(self) -> ShadowTarget:
        return ShadowTarget(self.seams(), gap_wait_s=1.0, retries=1, preflight=self.preflight, gate=FakeGate(),
                            capacity=lambda new, old: self.fits)

    def switcher(self) -> Switcher:
        return Switcher(self.seams(), gate=FakeGate(), journal=lambda unit, scope: "", preflight=self.preflight,
                        fault=lambda step: None, capacity=lambda new, old: self.fits, ports_in_use=lambda port: set())


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    profiles = profiles_dir_with(tmp_path, monkeypatch, ("live", "fast", "slow"))
    state = StateDir(tmp_path / "state" / "specd")
    deployment = Deployment(UNIT, "user", profiles, proxy=ProxyConfig(listen_port=8080))
    world = World(deployment, state, History(state.db), FakeSlotsSystemd(), FakeServers())
    world.switcher().switch("live", "restart")
    world.systemd.calls.clear()
    return world


def workload(n: int = 2) -> Workload:
    return Workload("test", tuple(WorkloadRequest({"messages": [{"role": "user", "content": f"q{i}"}], "max_tokens": 4},
                                                  "code") for i in range(n)))


def test_candidates_run_in_the_free_slot_and_the_live_server_is_never_touched(world: World) -> None:
    live_pid = world.systemd.units[UNIT].main_pid
    with world.shadow() as target:
        report = bench_profiles(target, ["fast", "slow"], workload(), Settings(n=2, warmup=0, early_stop=False))
        assert set(world.systemd.running()) == {UNIT, GREEN}
    assert sorted(report.benched()) == ["fast", "slow"]
    assert {s.split("/", 1)[0] for s in world.servers.seen} == {"8082"}  # the spare port, never the live one
    assert ("restart", UNIT) not in world.systemd.calls and world.systemd.units[UNIT].main_pid == live_pid
    assert read_pointer(world.state, world.deployment) == "blue"
    assert world.systemd.running() == [UNIT]  # the candidate is stopped at the end
    assert not slot(world.deployment, "green").unit_path.exists()
    assert [g.profile for g in world.history.list(UNIT)] == ["live"]  # a bench is not a deployment change


def test_activation_is_lazy_so_putting_the_live_profile_back_costs_nothing(world: World) -> None:
    with world.shadow() as target:
        assert target.active() == "live"
        target.activate("fast")
        target.activate("live")  # what the bench's `restoring` does at the end
        assert world.systemd.calls == []


def test_a_sample_that_saw_live_traffic_is_sent_again_and_marked_when_it_stays_dirty(world: World) -> None:
    world.servers.busy_during = 1
    with world.shadow() as target:
        target.activate("fast")
        target.complete({"messages": [{"role": "user", "content": "q"}], "max_tokens": 4})
        assert [(m.live_load, m.attempts) for m in target.marks] == [(0, 2)]  # re-sent after the gap: clean
        world.servers.busy_during = 2
        target.complete({"messages": [{"role": "user", "content": "q"}], "max_tokens": 4})
        assert (target.marks[-1].live_load, target.marks[-1].attempts) == (1, 2)  # still dirty: marked


def test_a_candidate_that_does_not_fit_beside_the_live_server_is_refused(world: World) -> None:
    world.fits = Capacity(False, "1 + 2 threads on 2 cores")
    with world.shadow() as target:
        target.activate("fast")
        with pytest.raises(PreflightError, match="does not fit beside the live server: 1 \\+ 2 threads"):
            target.complete({"messages": [], "max_tokens": 1})
    assert world.systemd.running() == [UNIT]


def test_a_switch_stops_a_candidate_a_killed_bench_left_in_the_free_slot(world: World) -> None:
    target = world.shadow()
    target.activate("fast")
    target.complete({"messages": [], "max_tokens": 1})  # then the bench is killed: no close()
    assert set(world.systemd.running()) == {UNIT, GREEN}
    world.switcher().switch("slow", "restart")
    assert world.systemd.running() == [UNIT]
    target.load.stop()


def result(profile: str, wall_ms: float) -> Result:
    return Result(profile, 0, "code", 5, 4, 1.0, 2.0, wall_ms)


def report_of(walls: dict[str, list[float]]) -> Report:
    return Report("test", list(walls), {p: [result(p, w) for w in ws] for p, ws in walls.items()})


def test_contaminated_samples_are_left_out_when_enough_clean_ones_remain() -> None:
    report = report_of({"a": [100.0, 101.0, 102.0, 900.0], "b": [200.0, 201.0, 202.0]})
    marks = [LoadMark("a", w, 0, 0.0, 1) for w in (100.0, 101.0, 102.0)] + [LoadMark("a", 900.0, 3, 0.0, 3)]
    marks += [LoadMark("b", w, 0, 0.0, 1) for w in (200.0, 201.0, 202.0)]
    compared, note = clean_only(report, marks, floor=3)
    assert [r.wall_ms for r in compared.results["a"]] == [100.0, 101.0, 102.0]
    assert "left out" in note and "clean samples only" in note
    assert load_notes(report, marks)[0].startswith("a: 3 of 4 samples clean") and "up to 3 request(s)" in \
        load_notes(report, marks)[0]


def test_too_few_clean_samples_are_compared_with_the_contaminated_and_it_says_so() -> None:
    report = report_of({"a": [100.0, 900.0], "b": [200.0, 201.0]})
    marks = [LoadMark("a", 100.0, 0, 0.0, 1), LoadMark("a", 900.0, 2, 0.0, 3),
             LoadMark("b", 200.0, 0, 0.0, 1), LoadMark("b", 201.0, 0, 0.0, 1)]
    compared, note = clean_only(report, marks, floor=2)
    assert compared is report and "compared together" in note
