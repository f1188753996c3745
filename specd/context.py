"""The composition root: builds the real seams a deployment's operations run over.

Library code (`specd.deploy`, `specd.daemon`, `specd.tune`) takes its systemd client, history and
health gate as arguments; the CLI, the daemon and the tuner get them here. Restarts made through
`systemd_for` first drain the daemon's proxy for the unit (the drain is the caller's concern,
not the transaction's).
"""

from __future__ import annotations

from functools import partial

from specd.daemon.control import DrainingSystemd, StepRelay
from specd.deploy.health import wait_healthy
from specd.deploy.history import History
from specd.deploy.plan import StepHook
from specd.deploy.switch import Switcher
from specd.deploy.systemd import SystemdClient, connect_systemd
from specd.profiles.config import Deployment


def systemd_for(deployment: Deployment) -> SystemdClient:
    """The systemd client for a deployment; its restarts and stops drain the daemon's proxy."""
    return DrainingSystemd(connect_systemd(deployment.scope))


def switcher_for(deployment: Deployment, *, trigger: str = "cli", history: History | None = None,
                 systemd: SystemdClient | None = None, on_step: StepHook | None = None) -> Switcher:
    """A Switcher over the real seams: the bus is connected on first use, restarts drain.
    `on_step` hears every step of the transaction and of its health gate (the status page); a
    switch from the command line tells them to the daemon, whose page shows it live."""
    if on_step is None and trigger == "cli":
        on_step = StepRelay(deployment.unit)
    return Switcher(deployment, trigger=trigger, history=history, systemd=systemd,
                    connect=lambda: systemd_for(deployment), on_step=on_step,
                    gate=wait_healthy if on_step is None else partial(wait_healthy, on_step=on_step))


def main_pid_of(deployment: Deployment) -> int:
    """The deployment's running server's PID (0 when none or the manager cannot be asked): what
    preflight must not count as someone else holding the port or the VRAM."""
    from specd.errors import SystemdError

    if not deployment.unit_path.exists():
        return 0
    try:
        return switcher_for(deployment).systemd.unit_state(deployment.unit).main_pid
    except SystemdError:
        return 0
