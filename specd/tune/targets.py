"""What a bench or a verify run drives: one profile active at a time, and requests to it.

`DeploymentTarget` switches the deployment's unit with `Switcher` (health-gated) and posts to the
active llama-server; it is safe to call `complete` from several threads at once (concurrent
replay). `ModelTarget` answers from the emulator's performance model in-process (no server, no
clock): it is told how many requests are in flight and models the batching penalty and a
one-slot prompt cache, so concurrency and cache reuse can be reasoned about without a server.
`Interruptible` wraps a target for the nightly run, which must stop when clients come back.

A bench's switches are steps, not choices: `DeploymentTarget` records them with trigger "bench"
(rollback's walk and the time-of-day schedule pass over those), and ends where its caller decided
through `settle`: back on the original by a rollback to the generation it started on (so the
history's active entry is that generation's content), or on a winner by a switch with the caller's
own trigger ("tuner").
"""

from __future__ import annotations

import math
import os
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import httpx

from specd.deploy.history import Trigger
from specd.deploy.seams import SeamsFactory
from specd.deploy.switch import Switcher
from specd.emulator.model import EmulatorModel, plan_request
from specd.endpoint import tcp_port
from specd.engines.facts import facts_of
from specd.engines.metrics import SpecCounters, read_counters
from specd.errors import HealthError, Interrupted, SpecdError, UsageError
from specd.gpu import nvml as gpu
from specd.profiles.config import Deployment
from specd.profiles.load import load_profile
from specd.traffic.taskclass import asks_to_repeat, classify, last_user_text
from specd.unit.parse import parse_unit

REQUEST_TIMEOUT_S = 600.0


_BENCH_NEEDS = "the bench (it runs through the switches and traffic specd times over TCP)"


@dataclass(frozen=True)
class Reply:
    payload: Mapping[str, Any]
    wall_ms: float
    box_load: float | None = None  # the box's CPU pressure while it ran (specd.tune.noise), when measured
    live_load: int | None = None  # the most requests the live server had in progress meanwhile (shadow bench)


class Target(Protocol):
    """One profile active at a time. `concurrent` targets take `complete` calls from several threads;
    the others are called one at a time and told `in_flight` (the requests they should assume running)."""

    concurrent: bool

    def active(self) -> str | None: ...
    def activate(self, profile: str) -> None: ...
    def complete(self, body: Mapping[str, Any], in_flight: int = 1) -> Reply: ...
    def vram_bytes(self) -> int | None: ...


@runtime_checkable
class Settles(Protocol):
    """A target that ends a bench its own way (see the module docstring); others just `activate`."""

    def settle(self, profile: str) -> None: ...


class DeploymentTarget:
    """The real thing: health-gated switches of the unit, HTTP to its llama-server.

    Each activation uses fresh seams (and D-Bus connection): a bench outlives connections. `seams` is
    the composition root's factory (specd.context.seams_for), whose restarts drain the daemon's proxy.
    `trigger` is what `settle` records a winner with; every bench step is recorded as "bench".
    """

    concurrent = True

    def __init__(self, deployment: Deployment, *, seams: SeamsFactory, trigger: Trigger = "bench") -> None:
        self.deployment = deployment
        self._seams = seams
        self.trigger = trigger
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
        self.http = httpx.Client(timeout=httpx.Timeout(REQUEST_TIMEOUT_S, connect=5.0), limits=limits)
        self._url = ""
        self._alias = ""
        self._main_pid = 0
        self._origin: tuple[str | None, int | None] | None = None  # (profile, its healthy generation) at the start
        self.moved = False  # a bench step changed the unit
        self.steps: Trigger = "verify" if trigger == "verify" else "bench"  # what each step is recorded as
        self.engine = "llama-server"  # the active profile's (specd.engines.facts)

    def active(self) -> str | None:
        seams = self._seams(self.deployment)
        try:
            switcher = Switcher(seams, trigger=self.trigger)
            profile = switcher.active_profile()
            installed = switcher.installed_text()
            if installed is not None:  # before any bench step: a server on a Unix socket is refused here
                tcp_port(parse_unit(installed, str(switcher.serving().unit_path)).base_url, _BENCH_NEEDS)
            if self._origin is None:
                generation = switcher.history.active(self.deployment.unit)
                healthy = generation is not None and generation.outcome == "ok" and generation.profile == profile
                self._origin = (profile, generation.id if healthy and generation is not None else None)
            return profile
        finally:
            seams.close()

    def activate(self, profile: str) -> None:
        """A bench step: switch (health-gated), recorded with trigger "bench" (a verify run's: "verify")."""
        if self._origin is None:
            self.active()
        tcp_port(load_profile(self.deployment.profiles_dir, profile).base_url, _BENCH_NEEDS)
        self._move(lambda switcher: switcher.switch(profile).unchanged, profile, self.steps)

    def settle(self, profile: str) -> None:
        """End on `profile`: the original by a rollback to its generation, a winner by a switch with
        `trigger` (after going back first when a bench step left it running: that generation chose nothing)."""
        origin, generation = self._origin or (None, None)
        on = self.active()
        if not self.moved or (profile == origin and on == origin):  # back where it began: nothing to restart
            if on != profile:
                self._move(lambda switcher: switcher.switch(profile).unchanged, profile, self.trigger)
            return
        if profile != origin and on == profile and origin is not None:
            self.settle(origin)
        if profile == origin and generation is not None:
            self._move(lambda switcher: switcher.rollback(to=generation, strategy="auto").unchanged, profile,
                       self.steps)
        elif profile == origin:
            self._move(lambda switcher: switcher.switch(profile).unchanged, profile, self.steps)
        else:
            self._move(lambda switcher: switcher.switch(profile).unchanged, profile, self.trigger)

    def _move(self, step: Callable[[Switcher], bool], profile: str, trigger: Trigger) -> None:
        seams = self._seams(self.deployment)
        try:
            switcher = Switcher(seams, trigger=trigger)
            unchanged = step(switcher)
            self.moved = self.moved or not unchanged
            loaded = load_profile(self.deployment.profiles_dir, profile)
            serving = switcher.serving()  # a blue-green switch may have moved the server to the spare port
            installed = switcher.installed_text()
            self._url = parse_unit(installed, str(serving.unit_path)).base_url if installed else loaded.base_url
            self._alias = loaded.alias or ""
            self.engine = loaded.engine
            self._main_pid = switcher.systemd.unit_state(serving.unit).main_pid
        finally:
            seams.close()

    def complete(self, body: Mapping[str, Any], in_flight: int = 1) -> Reply:
        started = time.perf_counter()
        try:
            answer = self.http.post(f"{self._url}/v1/chat/completions", json={**body, "model": self._alias})
        except httpx.HTTPError as exc:
            raise HealthError(f"request to {self._url} failed: {type(exc).__name__}: {exc}") from exc
        wall_ms = 1000.0 * (time.perf_counter() - started)
        if answer.status_code != 200:
            raise HealthError(f"request to {self._url} answered {answer.status_code}: {answer.text[:200]}")
        return Reply(answer.json(), wall_ms)

    def spec_counters(self) -> SpecCounters | None:
        """The active server's draft counters on /metrics; for vLLM (it registers them only with a
        speculator) a page without them is zero drafted."""
        facts = facts_of(self.engine)
        counters = read_counters(self.http, self._url, facts) if self._url else None
        if counters is None and self.engine == "vllm" and self._url:
            try:
                answered = self.http.get(f"{self._url}/metrics").status_code == 200
            except httpx.HTTPError:
                answered = False
            return SpecCounters(0, 0) if answered else None
        return counters

    def vram_bytes(self) -> int | None:
        used = gpu.process_vram(self._main_pid) if self._main_pid else None
        return used.used_bytes if isinstance(used, gpu.ProcessVram) else None

    def close(self) -> None:
        self.http.close()


class ModelTarget:
    """The emulator's performance model in-process: modelled timings, no server, no waiting.

    `modes` maps profile name to an emulator mode key (none, mtp, dflash, draft, ngram), `draft_n_max`
    a profile to its draft length (a sweep's variants). With
    `cache_prompt` in a body, the prefix shared with the previous prompt counts as `cache_n` (one
    slot, as a `-np 1` server); a switch empties it.
    """

    concurrent = False
    cheap_switches = True  # nothing restarts: a round of one request per profile costs nothing extra

    def __init__(self, model: EmulatorModel, modes: Mapping[str, str], *, seed: int = 0,
                 active: str | None = None, draft_n_max: Mapping[str, int] | None = None) -> None:
        self.model, self.modes, self._active = model, dict(modes), active
        self.draft_n_max = dict(draft_n_max or {})  # per profile, as its --spec-draft-n-max; default: the mode's
        self.rng = random.Random(seed)
        self.switches = 0
        self._slot_text = ""

    def active(self) -> str | None:
        return self._active

    def activate(self, profile: str) -> None:
        if profile not in self.modes:
            raise UsageError(f"no emulated profile {profile!r}", hint=f"known: {', '.join(sorted(self.modes))}")
        self.switches += self._active != profile
        self._active = profile
        self._slot_text = ""

    def noise(self) -> float:
        return math.exp(self.rng.gauss(0.0, self.model.noise_sigma)) if self.model.noise_sigma > 0 else 1.0

    def complete(self, body: Mapping[str, Any], in_flight: int = 1) -> Reply:
        if self._active is None:
            raise UsageError("no emulated profile is active")
        messages = list(body["messages"])
        text = "".join(str(m.get("content", "")) for m in messages)
        cpt = self.model.chars_per_token
        cached = int(len(os.path.commonprefix([self._slot_text, text])) / cpt) if body.get("cache_prompt") else 0
        self._slot_text = text
        timing = plan_request(
            self.model.mode(self.modes[self._active]),
            prompt_tokens=max(1, int(len(text) / cpt)), cache_n=cached,
            output_tokens=int(body["max_tokens"]), task_class=classify(messages), in_flight=in_flight,
            repeats_input=asks_to_repeat(last_user_text(messages)), draft_n_max=self.draft_n_max.get(self._active),
            prefill_noise=self.noise(), decode_noise=self.noise())
        payload = {"usage": {"prompt_tokens": timing.prompt_n + timing.cache_n,
                             "completion_tokens": timing.predicted_n},
                   "timings": {"cache_n": timing.cache_n, "prompt_n": timing.prompt_n,
                               "prompt_ms": timing.prompt_ms, "predicted_n": timing.predicted_n,
                               "predicted_ms": timing.predicted_ms, "draft_n": timing.draft_n,
                               "draft_n_accepted": timing.draft_n_accepted}}
        return Reply(payload, timing.wall_ms)

    def vram_bytes(self) -> int | None:
        return None


class Interruptible:
    """A target that refuses new work once `stop` is set, except the switch back to the live profile.

    The nightly job sets `stop` when clients send requests: requests already sent finish (a round
    waits for them), no new one starts, and the bench's `restoring` puts the live profile back.
    """

    def __init__(self, inner: Target, stop: threading.Event) -> None:
        self.inner, self.stop = inner, stop
        self.concurrent = inner.concurrent
        self.live = inner.active()

    def _refuse(self) -> Interrupted:
        return Interrupted("clients sent requests during the nightly run: it stopped")

    def active(self) -> str | None:
        return self.inner.active()

    def activate(self, profile: str) -> None:
        """Once stopped, any switch but the one to the live profile puts the live profile back instead
        (also the tuner's switch to a winner it decided on just before the clients came)."""
        if self.stop.is_set() and profile != self.live:
            if self.live is not None and self.inner.active() != self.live:
                self.inner.activate(self.live)
            raise self._refuse()
        self.inner.activate(profile)

    def settle(self, profile: str) -> None:
        """As `activate`, through the inner target's own ending when it has one."""
        if self.stop.is_set() and profile != self.live:
            if self.live is not None:
                self.settle(self.live)
            raise self._refuse()
        if isinstance(self.inner, Settles):
            self.inner.settle(profile)
        elif self.inner.active() != profile:
            self.inner.activate(profile)

    def complete(self, body: Mapping[str, Any], in_flight: int = 1) -> Reply:
        if self.stop.is_set():
            raise self._refuse()
        try:
            return self.inner.complete(body, in_flight)
        except SpecdError as exc:
            if self.stop.is_set():
                raise self._refuse() from exc
            raise

    @property
    def engine(self) -> str | None:
        return getattr(self.inner, "engine", None)

    def spec_counters(self) -> SpecCounters | None:
        reader = getattr(self.inner, "spec_counters", None)
        return reader() if callable(reader) else None

    def vram_bytes(self) -> int | None:
        return self.inner.vram_bytes()
