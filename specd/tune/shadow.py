"""Shadow bench: benchmark profiles in the free slot while the live one keeps serving.

The bench's usual target (`DeploymentTarget`) switches the live server to each candidate, so the
service is down for the whole bench. `ShadowTarget` starts each candidate in the deployment's
free slot instead (specd.deploy.slots: the green companion unit while blue serves, or the other
way round), on the spare port, health-gated, and never touches the slot pointer, the proxy or the
history: clients keep talking to the live server throughout. It needs both servers to fit
(specd.deploy.capacity, the check `--strategy auto` uses) and refuses otherwise.

Live traffic shares the CPU/GPU with the candidate, so a sample taken while the live server is
busy is slower for reasons that are not the profile's. Each request waits for an idle gap on the
live server (up to `gap_wait_s`), the live server's load (requests in progress, from its own
/slots and /metrics: specd.deploy.load) is sampled while it runs, and a sample that saw live load
is re-sent after the next gap (up to `retries` times). What still saw load is *contaminated*: every
sample carries its mark (`LoadMark`), `load_notes` says how many of each profile's samples are
contaminated, and `clean_only` drops them when every profile keeps enough clean ones, so clean and
contaminated samples are never compared without saying so.

Activation is lazy: `activate` only names the profile, the first request starts it. So the
bench's closing "put the original back" costs nothing here (the live server never left). Each
candidate is a transaction of the deploy layer's shadow plan (specd.deploy.candidate): outside a
shadow bench the free slot is stopped, `close` stops it and puts its unit file back, and any
mutating specd command undoes the candidate of a killed bench from its intent record before it
acts. `make_winner_live` then switches the live server to the bench's winner.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import TracebackType
from typing import Any, Self

import httpx

from specd.deploy.candidate import Candidate, start_candidate
from specd.deploy.capacity import CapacityCheck, capacity_check
from specd.deploy.companions import companion_commands
from specd.deploy.health import wait_healthy
from specd.deploy.load import requests_in_progress
from specd.deploy.plan import HealthGate, PreflightRunner, Target
from specd.deploy.preflight import port_holders, run_preflight
from specd.deploy.seams import Seams
from specd.deploy.slots import Slot, other, port_beside, port_of, slot, with_port
from specd.deploy.switch import Switcher
from specd.deploy.unitfiles import read_text
from specd.errors import HealthError, PreflightError, UsageError
from specd.gpu import nvml as gpu
from specd.tune.bench import Report, Result
from specd.tune.targets import REQUEST_TIMEOUT_S, Reply
from specd.tune.tuner import TuneResult
from specd.unit.parse import parse_unit
from specd.unit.render import profile_of_unit

POLL_S = 0.05


@dataclass(frozen=True)
class LoadMark:
    """One shadow sample and the live server's load while it ran."""

    profile: str
    wall_ms: float
    live_load: int  # the most requests the live server had in progress during the sample (0: clean)
    gap_wait_s: float  # how long it waited for the live server to go idle before it was sent
    attempts: int  # 1 unless an earlier attempt saw live load and was re-sent


class LiveLoad:
    """Polls the live server's requests in progress from a thread; windows keep the most seen."""

    def __init__(self, client: httpx.Client, url: str, api_key: str | None) -> None:
        self._client, self._url, self._api_key = client, url, api_key
        self._lock = threading.Lock()
        self._windows: dict[int, int] = {}
        self._next = 0
        self.now = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="live-load")

    def _read(self) -> int:
        return requests_in_progress(self._client, self._url, self._api_key) or 0

    def _run(self) -> None:
        while not self._stop.wait(POLL_S):
            value = self._read()
            with self._lock:
                self.now = value
                for key in self._windows:
                    self._windows[key] = max(self._windows[key], value)

    def start(self) -> None:
        self.now = self._read()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def open(self) -> int:
        with self._lock:
            self._next += 1
            self._windows[self._next] = self.now
            return self._next

    def close(self, window: int) -> int:
        with self._lock:
            return max(self._windows.pop(window), self.now)

    def wait_idle(self, timeout_s: float) -> float:
        """Seconds waited for a reading of 0 (at most `timeout_s`)."""
        started = time.monotonic()
        while self.now and time.monotonic() - started < timeout_s:
            time.sleep(POLL_S)
        return time.monotonic() - started


class ShadowTarget:
    """A bench target in the free slot beside the live server (see the module docstring)."""

    concurrent = True

    def __init__(self, seams: Seams, *, gap_wait_s: float = 10.0, retries: int = 2,
                 preflight: PreflightRunner = run_preflight, gate: HealthGate = wait_healthy,
                 capacity: CapacityCheck | None = None) -> None:
        self.seams = seams
        self.gap_wait_s, self.retries = gap_wait_s, retries
        self._preflight, self._gate = preflight, gate
        self._capacity = capacity or capacity_check(seams.nvml, beside=lambda: companion_commands(seams.deployment))
        self.marks: list[LoadMark] = []
        self._wanted: str | None = None
        self._running: str | None = None
        self._start_lock = threading.Lock()
        self._url, self._alias, self._main_pid = "", "", 0
        self._candidate: Candidate | None = None
        self._http = seams.http(REQUEST_TIMEOUT_S)
        self._probe = seams.http(2.0)
        live = self._live()
        self.live_profile = profile_of_unit(live[1]) if live[1] else None
        command = parse_unit(live[1], str(live[0].unit_path))
        self.load = LiveLoad(self._probe, command.base_url, command.api_key)
        self.load.start()

    def _live(self) -> tuple[Slot, str]:
        serving = self.seams.serving()
        text = read_text(serving.unit_path)
        if text is None or not self.seams.systemd.unit_state(serving.unit).running:
            raise UsageError(f"{self.seams.unit}: no live server runs, so there is nothing to bench beside",
                             hint="bench without --shadow (it switches the unit itself)")
        return serving, text

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()

    # -- the Target protocol ---------------------------------------------------------------

    def active(self) -> str | None:
        return self._wanted or self.live_profile

    def activate(self, profile: str) -> None:
        self._wanted = profile  # started by the first request (see the module docstring)

    def complete(self, body: Mapping[str, Any], in_flight: int = 1) -> Reply:
        profile = self._ensure_started()
        waited = 0.0
        for attempt in range(1, self.retries + 2):
            waited += self.load.wait_idle(self.gap_wait_s)
            window = self.load.open()
            started = time.perf_counter()
            try:
                answer = self._http.post(f"{self._url}/v1/chat/completions", json={**body, "model": self._alias})
            except httpx.HTTPError as exc:
                self.load.close(window)
                raise HealthError(f"shadow request to {self._url} failed: {type(exc).__name__}: {exc}") from exc
            wall_ms = 1000.0 * (time.perf_counter() - started)
            live = self.load.close(window)
            if answer.status_code != 200:
                raise HealthError(f"shadow request to {self._url} answered {answer.status_code}: {answer.text[:200]}")
            if live == 0 or attempt > self.retries:
                self.marks.append(LoadMark(profile, wall_ms, live, round(waited, 3), attempt))
                return Reply(answer.json(), wall_ms, live_load=live)
        raise AssertionError("unreachable")  # pragma: no cover

    def vram_bytes(self) -> int | None:
        used = gpu.process_vram(self._main_pid) if self._main_pid else None
        return used.used_bytes if isinstance(used, gpu.ProcessVram) else None

    # -- the free slot -----------------------------------------------------------------------

    def check(self, profile: str) -> None:
        """Refuse (PreflightError) a profile the free slot cannot hold beside the live server; starts nothing."""
        serving, live_text = self._live()
        pre = self._preflight(self.seams.deployment, profile,
                              current_main_pid=self.seams.systemd.unit_state(serving.unit).main_pid)
        fit = self._capacity(pre, parse_unit(live_text, str(serving.unit_path)))
        if not fit.fits:
            raise PreflightError(f"shadow bench: {profile} does not fit beside the live server: {fit.reason}",
                                 hint="bench without --shadow (it switches the live server)")

    def _ensure_started(self) -> str:
        with self._start_lock:
            wanted = self._wanted or self.live_profile
            if wanted is None:
                raise UsageError("no profile to bench: the live unit is not one specd rendered")
            if self._running != wanted:
                self._running = None
                self._start(wanted)
                self._running = wanted
            return wanted

    def _start(self, profile: str) -> None:
        seams, systemd = self.seams, self.seams.systemd
        with seams.lock(f"shadow bench: start {profile} in the free slot"):
            serving, live_text = self._live()
            self._stop_candidate()  # the previous one
            free = slot(seams.deployment, other(serving.name))
            pre = self._preflight(seams.deployment, profile,
                                  current_main_pid=systemd.unit_state(serving.unit).main_pid)
            port = port_beside(seams.deployment, pre.unit_text, port_of(live_text), where=profile)
            text = pre.unit_text if port == port_of(pre.unit_text) else with_port(pre.unit_text, port, profile)
            fit = self._capacity(pre, parse_unit(live_text, str(serving.unit_path)))
            if not fit.fits:
                raise PreflightError(f"shadow bench: {profile} does not fit beside the live server: {fit.reason}",
                                     hint="bench without --shadow (it switches the live server)")
            if systemd.unit_state(free.unit).running:
                systemd.stop(free.unit)  # a stray server holding the port (a killed bench's, before recovery)
            holders = port_holders(port)
            if holders:
                raise PreflightError(f"shadow bench: port {port} is in use "
                                     f"(pid {', '.join(map(str, sorted(holders)))})",
                                     hint="set [proxy] spare_port to a free port")
            command = parse_unit(text, str(free.unit_path))
            target = Target(text, profile, pre.profile.alias, command.base_url, pre.profile.health_timeout_s,
                            min(pre.profile.stability_s, 1.0), pre.profile.api_key, pre.secrets)
            self._candidate = start_candidate(seams, target, gate=self._gate)
        self._url, self._alias = command.base_url, pre.profile.alias or ""
        self._main_pid = self._candidate.main_pid

    def _stop_candidate(self) -> None:
        if self._candidate is not None:
            self._candidate.stop()
            self._candidate = None

    def close(self) -> None:
        """Stop the candidate, put the free slot's unit file back as it was, stop sampling."""
        self.load.stop()
        self._http.close()
        self._probe.close()
        if self._candidate is None:
            return
        with self.seams.lock("shadow bench: stop the free slot"):
            self._stop_candidate()


def make_winner_live(result: TuneResult, target: ShadowTarget) -> TuneResult:
    """After a shadow bench the live server never left: switch it to the winner now (health-gated,
    as any switch) when the decision says so, and note how clean each profile's samples were."""
    decision = replace(result.decision, notes=(*result.decision.notes, *load_notes(result.report, target.marks)))
    switcher = Switcher(target.seams, trigger="tuner")
    if decision.switch and decision.best:
        switcher.switch(decision.best)
    result.decision = decision
    result.final_profile = switcher.active_profile()
    return result


# ---- reading the marks ---------------------------------------------------------------------------


def _mark_of(marks: list[LoadMark], result: Result) -> LoadMark | None:
    return next((m for m in marks if m.profile == result.profile and m.wall_ms == result.wall_ms), None)


def load_notes(report: Report, marks: list[LoadMark]) -> list[str]:
    """One line per profile: how many samples were clean and how many ran beside live traffic."""
    notes = []
    for profile in report.benched():
        seen = [_mark_of(marks, r) for r in report.results[profile]]
        dirty = [m for m in seen if m is not None and m.live_load > 0]
        waited = sum(m.gap_wait_s for m in seen if m is not None)
        line = f"{profile}: {len(seen) - len(dirty)} of {len(seen)} samples clean (the live server idle)"
        if dirty:
            line += (f", {len(dirty)} taken while it served up to {max(m.live_load for m in dirty)} request(s) "
                     "(contaminated)")
        notes.append(f"{line}; {waited:.1f} s waited for idle gaps")
    return notes


def clean_only(report: Report, marks: list[LoadMark], floor: int) -> tuple[Report, str]:
    """The report with contaminated samples dropped when every profile keeps `floor` clean ones;
    else the report as it is. The sentence says which, for the notes."""
    kept = {p: [r for r in rows if (m := _mark_of(marks, r)) is None or m.live_load == 0]
            for p, rows in report.results.items()}
    dropped = sum(len(rows) for rows in report.results.values()) - sum(len(rows) for rows in kept.values())
    if dropped == 0:
        return report, "every shadow sample was taken while the live server was idle"
    if all(len(kept[p]) >= floor for p in report.benched()):
        note = (f"{dropped} sample(s) taken beside live traffic were left out; the profiles are compared on "
                "clean samples only")
        return replace(report, results=kept), note
    return report, (f"{dropped} sample(s) were taken beside live traffic and too few clean ones remain: clean and "
                    "contaminated samples are compared together (see each profile's count)")
