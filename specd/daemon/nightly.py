"""When the nightly tuning fires, and what the daemon hands it; the per-period pins' check.

`[tuner] cron` is a crontab line (minute hour day month weekday); a sixth, leading field gives the
second, for runs that must fire at an exact moment (the end-to-end tests of the night use it). The
job itself lives in specd.tune.night, imported here lazily: the tuner sits above the daemon. Its
switches run over the daemon's seams factory (specd.context.seams_for: restarts drain this daemon's proxy).
The daemon hands it
the proxy's counts of client requests (accepted so far, in flight now), so the run waits while
clients are about and stops when they come back.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import ModuleType

from apscheduler.triggers.cron import CronTrigger

from specd.deploy.seams import SeamsFactory
from specd.errors import ConfigError
from specd.profiles.config import Config, Deployment
from specd.proxy.proxy import Proxy

CRON_FIELDS = ("minute", "hour", "day", "month", "day_of_week")


def cron_trigger(cron: str, config_path: Path | None) -> CronTrigger:
    """The trigger for `[tuner] cron`: five crontab fields, or six with the second first."""
    fields = cron.split()
    try:
        if len(fields) == len(CRON_FIELDS) + 1:
            return CronTrigger(second=fields[0], **dict(zip(CRON_FIELDS, fields[1:], strict=True)))
        return CronTrigger.from_crontab(cron)
    except ValueError as exc:
        raise ConfigError(f"{config_path}: [tuner] cron {cron!r}: {exc}",
                          hint="five crontab fields (30 3 * * *), or six with the second first") from exc


def _tune_module(name: str) -> ModuleType | None:
    """specd.tune.`name`, imported lazily (the tuner sits above the daemon), or None when it is not installed."""
    try:
        return importlib.import_module(f"specd.tune.{name}")
    except ModuleNotFoundError as exc:
        if exc.name is None or not exc.name.startswith("specd.tune"):
            raise
        return None


def nightly_job(config: Config, deployment: Deployment, proxy: Proxy | None,
                seams: SeamsFactory) -> Callable[[], object] | None:
    """The nightly run for one deployment, or None when specd.tune is not installed."""
    module = _tune_module("night")
    if module is None:
        return None
    return partial(module.nightly, config, deployment, seams=seams,
                   clients=None if proxy is None else (lambda: (proxy.accepted, proxy.in_flight)))


def schedule_job(deployment: Deployment, seams: SeamsFactory) -> Callable[[], object] | None:
    """The time-of-day pins' check for one deployment (specd.tune.schedule), or None without specd.tune."""
    module = _tune_module("schedule")
    if module is None:
        return None
    job: Callable[[], object] = module.ScheduleJob(deployment, seams=seams)
    return job
