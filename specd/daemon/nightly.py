"""When the nightly tuning fires, and the tuner's jobs as the daemon receives them.

`[tuner] cron` is a crontab line (minute hour day month weekday); a sixth, leading field gives the
second, for runs that must fire at an exact moment (the end-to-end tests of the night use it).

The jobs themselves live in specd.tune (the nightly run, `tune.night.nightly`; the time-of-day
pins' check, `tune.schedule.ScheduleJob`), which sits above the daemon: the composition root
(`specd.context.tuner_jobs`) hands them in as factories (`TunerJobs`), as it hands in the status
page, and the daemon never imports the tuner. Their switches run over the daemon's seams factory
(`specd.context.seams_for`: restarts drain this daemon's proxy). The nightly job gets the proxy's
counts of client requests (accepted so far, in flight now), so the run waits while clients are
about and stops when they come back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from apscheduler.triggers.cron import CronTrigger

from specd.deploy.seams import SeamsFactory
from specd.errors import ConfigError
from specd.profiles.config import Config, Deployment

CRON_FIELDS = ("minute", "hour", "day", "month", "day_of_week")

Job = Callable[[], object]
ClientCounts = Callable[[], tuple[int, int]]
"""(requests accepted so far, requests in flight now): the proxy's, for the nightly run."""
NightlyFactory = Callable[[Config, Deployment, "ClientCounts | None", SeamsFactory], Job]
"""(config, deployment, the proxy's client counts or None without a proxy, seams) -> the nightly run."""
ScheduleFactory = Callable[[Deployment, SeamsFactory], Job]
"""(deployment, seams) -> the pins' check, run every `[daemon] schedule_check_s`."""


@dataclass(frozen=True)
class TunerJobs:
    """The tuner's jobs, handed in by the composition root; none (the default) runs no tuner jobs."""

    nightly: NightlyFactory | None = None
    schedule: ScheduleFactory | None = None


NO_TUNER_JOBS = TunerJobs()


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
