"""The composition root: builds the real seams a deployment's operations run over.

Library code (`specd.deploy`, `specd.daemon`, `specd.tune`) takes a `Seams` (state paths, history,
systemd client, clock, HTTP, GPU access) and never builds its own; the CLI, the daemon and the
tuner get them here. The proxy link is the daemon's proxy as the transaction sees it: a restart
step runs inside its drain, and a blue-green switch tells it to follow the slot that serves.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from specd.daemon.control import DaemonProxyLink, StepRelay
from specd.daemon.nightly import ClientCounts, Job, TunerJobs
from specd.deploy.health import wait_healthy
from specd.deploy.history import History, Trigger
from specd.deploy.priority import ThreadNice
from specd.deploy.seams import Seams, SeamsFactory
from specd.deploy.systemd import SystemdClient, connect_systemd
from specd.errors import SystemdError
from specd.paths import StateDir
from specd.profiles.config import Config, Deployment

if TYPE_CHECKING:
    from specd.deploy.plan import StepHook
    from specd.deploy.switch import Switcher
    from specd.routing.residents import Routing


def state_dir() -> StateDir:
    """The state directory of this environment (XDG_STATE_HOME)."""
    return StateDir.from_environment()


def systemd_for(deployment: Deployment) -> SystemdClient:
    """The systemd client for a deployment (the proxy's drain is the transaction's step, not its)."""
    return connect_systemd(deployment.scope)


def seams_for(deployment: Deployment, *, history: History | None = None,
              systemd: SystemdClient | None = None) -> Seams:
    """A deployment's real seams; the bus is connected on first use. Each thread that runs
    operations builds its own (one SQLite connection per thread)."""
    state = state_dir()
    return Seams(deployment, state, history or History(state.db), lambda: systemd_for(deployment),
                 proxy=DaemonProxyLink(state), priority=ThreadNice(), _systemd=systemd)


def switcher_for(deployment: Deployment, *, trigger: Trigger = "cli", history: History | None = None,
                 systemd: SystemdClient | None = None, on_step: StepHook | None = None) -> Switcher:
    """A Switcher over the real seams. `on_step` hears every step of the transaction and of its
    health gate (the status page); a switch from the command line tells them to the daemon, whose
    page shows it live. (The transaction is imported here, not at the top: `specd status` builds
    seams but never switches, and need not load it.)"""
    from specd.deploy.switch import Switcher

    seams = seams_for(deployment, history=history, systemd=systemd)
    if on_step is None and trigger == "cli":
        on_step = StepRelay(seams.state, deployment.unit)
    return Switcher(seams, trigger=trigger, on_step=on_step,
                    gate=wait_healthy if on_step is None else partial(wait_healthy, on_step=on_step))


def routing_for(deployment: Deployment, *, on_step: StepHook | None = None) -> Routing:
    """Routing on/off and its table over the real seams (companions started like a switch's new
    server: health-gated; a CLI call tells its steps to the daemon's page). Imported here: it
    loads the capacity check and preflight, which `specd status` never needs."""
    from specd.routing.residents import Routing

    seams = seams_for(deployment)
    hook = on_step or StepRelay(seams.state, deployment.unit)
    return Routing(seams, gate=partial(wait_healthy, on_step=hook), on_step=hook)


def main_pid_of(seams: Seams) -> int:
    """The deployment's running server's PID (0 when none or the manager cannot be asked): what
    preflight must not count as someone else holding the port or the VRAM."""
    serving = seams.serving()
    if not serving.unit_path.exists():
        return 0
    try:
        return seams.systemd.unit_state(serving.unit).main_pid
    except SystemdError:
        return 0


def _nightly_job(config: Config, deployment: Deployment, clients: ClientCounts | None,
                 seams: SeamsFactory) -> Job:
    from specd.tune.night import nightly  # imported when the daemon schedules it: the CLI's start stays light

    return partial(nightly, config, deployment, seams=seams, clients=clients)


def _schedule_job(deployment: Deployment, seams: SeamsFactory) -> Job:
    from specd.tune.schedule import ScheduleJob

    return ScheduleJob(deployment, seams=seams)


def tuner_jobs() -> TunerJobs:
    """The tuner's jobs for the daemon (it sits below the tuner and never imports it): the nightly
    run (specd.tune.night) and the time-of-day pins' check (specd.tune.schedule)."""
    return TunerJobs(nightly=_nightly_job, schedule=_schedule_job)
