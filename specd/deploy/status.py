"""What `specd status` reports, gathered from the unit file, systemd, the endpoint, the history and
the daemon. Read-only: it never recovers, restarts or records anything."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

import httpx

from specd.deploy import intent as intents
from specd.deploy.health import check_once
from specd.deploy.history import History
from specd.deploy.seams import Seams
from specd.deploy.unitfiles import read_text
from specd.endpoint import shown
from specd.errors import SpecdError, UsageError
from specd.gpu.nvml import NoGpu, Nvml, process_vram
from specd.profiles.config import Scope
from specd.unit.parse import parse_unit
from specd.unit.render import profile_of_unit

# Daemon events that change what the deployment *is*, newest wins (recorded by the health monitor).
STATE_EVENTS = {"monitor-failed": "failed", "owner-stopped": "stopped by its owner", "owner-started": "running"}
# What the tuner's runs record (`specd tune`, its dry run, and the nightly run: specd.tune.night); the
# newest says how the last tuning went. `status` shows it as a line, `status --json` as `last_tune`.
TUNING_EVENTS = ("tune", "tune-dry-run", "tune-skip", "tune-stopped", "tune-failed")
PROBE_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class StatusReport:
    unit: str
    scope: Scope
    unit_path: str
    active_profile: str | None  # None: no unit, or a unit specd did not render
    managed: bool
    unit_state: str  # systemd's words: "active (running)", "not installed", "unknown (why)"
    main_pid: int | None
    n_restarts: int | None
    endpoint: str | None  # the server's own address (with a [proxy], the backend's)
    alias: str | None
    health: str  # "healthy" or "unhealthy: why"
    healthy: bool
    generation: int | None
    daemon: dict[str, Any]  # the daemon's own report (specd.daemon.control.daemon_status)
    state: str | None = None  # "failed: why" or "stopped by its owner: when" (the monitor's mark)
    pending: str | None = None  # an interrupted switch or rollback awaiting `specd recover`
    history_problem: str | None = None  # the state database could not be read
    last_tuning: str | None = None  # '<UTC time> <kind>: <sentence>' of the newest tuning run
    vram: str | None = None  # the server's VRAM per GPU, one line ("GPU0 7.1 GiB")
    vram_bytes: int | None = None
    vram_by_gpu: dict[str, int] | None = None  # GPU index -> bytes
    vram_unavailable: str | None = None  # why there is no VRAM reading (no NVIDIA GPU)
    slot: str = "blue"  # which slot serves: blue (the unit itself) or green (its companion unit)
    slot_unit: str = ""  # the systemd unit of that slot
    strategy: str | None = None  # how the active generation replaced the server: blue-green or restart
    clients_endpoint: str | None = None  # where clients connect: the [proxy]'s listen address, else the server's

    @property
    def needs_attention(self) -> bool:
        """What `specd status` exits non-zero for: not healthy, marked failed or stopped, or pending."""
        return not self.healthy or self.state is not None or self.pending is not None

    def as_dict(self) -> dict[str, Any]:
        """The `--json` form; optional marks appear only when set. The last tuning is `last_tune` (an
        object, from `specd.cli.facts`), not this sentence."""
        data = asdict(self)
        del data["last_tuning"]
        for optional in ("state", "pending", "history_problem", "vram", "vram_bytes", "vram_by_gpu",
                         "vram_unavailable", "strategy"):
            if data[optional] is None:
                del data[optional]
        return data


def deployment_state(history: History, unit: str) -> str | None:
    """'failed: why' or 'stopped by its owner: when' from the daemon's newest state event, if any."""
    for event in history.events(unit, limit=200):
        label = STATE_EVENTS.get(event["kind"])
        if label is not None:
            return None if event["kind"] == "owner-started" else f"{label}: {event['detail']}"
    return None


def last_tuning_event(history: History, unit: str) -> dict[str, Any] | None:
    """The newest tuning event (`at`, `kind`, `detail`), if any."""
    for event in history.events(unit, limit=500):
        if event["kind"] in TUNING_EVENTS:
            return dict(event)
    return None


def parse_record(detail: str) -> tuple[str, dict[str, Any]]:
    """A tuning event's detail (`specd.tune.tuner.record`: 'sentence | {json numbers}') back into
    (sentence, numbers); numbers are {} for a detail without them. Here, below the tuner, so that
    `specd status` reads it without loading the tuner."""
    reason, sep, numbers = detail.rpartition(" | ")
    if not sep:
        return detail, {}
    try:
        parsed = json.loads(numbers)
    except json.JSONDecodeError:
        return detail, {}
    return (reason, parsed) if isinstance(parsed, dict) else (detail, {})


def last_tuning(history: History, unit: str) -> str | None:
    """'<UTC time> <kind>: <sentence>' of the newest tuning run (its numbers are in `history --events`)."""
    event = last_tuning_event(history, unit)
    if event is None:
        return None
    sentence = parse_record(str(event["detail"]))[0]
    return f"{str(event['at'])[:19].replace('T', ' ')} UTC {event['kind']}: {sentence}"


def vram_of_server(main_pid: int, nvml: Nvml | None = None) -> dict[str, Any]:
    """The VRAM the server's process tree holds on each GPU (status shows one line, JSON per device);
    on a box without an NVIDIA GPU only the JSON says why there is none."""
    held = process_vram(main_pid, nvml=nvml)
    if isinstance(held, NoGpu):
        return {"vram_unavailable": held.reason}
    return {"vram": held.per_device(), "vram_bytes": held.used_bytes,
            "vram_by_gpu": {str(index): used for index, used in held.by_device}}


def pending_note(seams: Seams) -> str | None:
    pending = intents.load(seams.state.intent(seams.unit))
    if pending is None:
        return None
    return (f"an interrupted {pending.kind} to {pending.profile or 'the previous unit'} (stopped after step "
            f"'{pending.step}') awaits recovery: run `specd recover`")


def collect_status(seams: Seams, daemon: dict[str, Any], *, client: httpx.Client | None = None) -> StatusReport:
    """Read-only: gathers, never recovers or restarts anything. `daemon` is the daemon's own report;
    `client` (the status page's, kept open) saves building one per call."""
    deployment = seams.deployment
    serving = seams.serving()
    text = read_text(serving.unit_path)
    unit_state, main_pid, n_restarts = "not installed", None, None
    endpoint = alias = None
    health, healthy = "no unit", False
    if text is not None:
        try:
            state = seams.systemd.unit_state(serving.unit)
            unit_state, main_pid, n_restarts = state.describe(), state.main_pid, state.n_restarts
        except SpecdError as exc:  # the hint says where the manager is (quickstart's env.sh, a login session)
            unit_state = f"unknown ({exc.message}; {exc.hint})" if exc.hint else f"unknown ({exc.message})"
        try:
            command = parse_unit(text, str(serving.unit_path))
            endpoint, alias = shown(command.base_url), command.alias  # a socket: unix:/path
            if client is not None:
                probe = check_once(client, command.base_url, command.alias, api_key=command.api_key)
            else:
                with seams.http(PROBE_TIMEOUT_S) as own:
                    probe = check_once(own, command.base_url, command.alias, api_key=command.api_key)
            health, healthy = ("healthy", True) if probe.ok else (f"unhealthy: {probe.detail}", False)
        except UsageError as exc:
            health = f"unknown ({exc.message})"
    generation = marked = problem = tuning = strategy = None
    try:
        active = seams.history.active(deployment.unit)
        generation = active.id if active else None
        strategy = active.strategy if active else None
        marked = deployment_state(seams.history, deployment.unit)
        tuning = last_tuning(seams.history, deployment.unit)
    except SpecdError as exc:
        problem = exc.message
    vram = vram_of_server(main_pid, seams.nvml) if main_pid else {}
    proxy = deployment.proxy
    host = None if proxy is None else (f"[{proxy.listen_host}]" if ":" in proxy.listen_host else proxy.listen_host)
    clients = f"http://{host}:{proxy.listen_port}" if proxy is not None else endpoint
    return StatusReport(
        unit=deployment.unit, scope=deployment.scope, unit_path=str(serving.unit_path),
        active_profile=profile_of_unit(text) if text else None, managed=bool(text and profile_of_unit(text)),
        unit_state=unit_state, main_pid=main_pid, n_restarts=n_restarts, endpoint=endpoint, alias=alias,
        health=health, healthy=healthy, generation=generation, daemon=daemon, state=marked,
        pending=pending_note(seams), history_problem=problem, last_tuning=tuning, slot=serving.name,
        slot_unit=serving.unit, strategy=strategy, clients_endpoint=clients, **vram)
