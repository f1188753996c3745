"""pin / unpin: keep the tuner off a deployment, all day or for one time of day (a schedule the
daemon applies: specd.tune.schedule)."""

from __future__ import annotations

from typing import Annotated

import typer

from specd.cli import app as cli_app
from specd.cli import console, styled
from specd.cli.common import ConfigOption, UnitOption, deployment_of
from specd.errors import UsageError
from specd.profiles.load import load_profile
from specd.tune.periods import PERIODS, Period
from specd.tune.pins import Pin, clear_period_pins, clear_pin, get_pin, set_period_pin, set_pin

PERIOD_HELP = ", ".join(f"{name} {lo:02d}-{hi:02d}" for name, lo, hi in PERIODS)
PinPeriodOption = Annotated[Period | None, typer.Option(
    "--period", help=f"only at this time of day, local time ({PERIOD_HELP}); the daemon switches to PROFILE when it "
                     "begins and back when it ends")]


@cli_app.command()
def pin(
    profile: Annotated[str, typer.Argument(help="the profile the tuner must keep")],
    period: PinPeriodOption = None,
    config: ConfigOption = None,
    unit: UnitOption = None,
) -> None:
    """Keep the tuner (and its nightly run) from switching this deployment away from PROFILE; with
    --period, only at that time of day, and the daemon switches to PROFILE when the period begins."""
    _, deployment = deployment_of(config, unit)
    load_profile(deployment.profiles_dir, profile)
    if period is not None:
        set_period_pin(deployment.unit, period, profile)
        console.print(styled("pinned {} to [bold]{}[/] in the {}: {}", deployment.unit, profile, period,
                             "the daemon switches to it when the period begins (within [daemon] schedule_check_s) "
                             "and back when it ends"), highlight=False)
        if get_pin(deployment.unit) is not None:
            console.print(styled("[dim]note:[/] an all-day pin holds everything; the schedule waits until "
                                 "`specd unpin`"), highlight=False)
        return
    set_pin(deployment.unit, profile)
    console.print(styled("pinned {} to [bold]{}[/]; the tuner will not switch it", deployment.unit, profile),
                  highlight=False)
    from specd.context import switcher_for

    active = switcher_for(deployment).active_profile()
    if active != profile:
        console.print(styled("[dim]note:[/] the active profile is {}; run `specd switch {}`", active or "none",
                             profile), highlight=False)


@cli_app.command()
def unpin(
    period: Annotated[Period | None, typer.Option("--period", help="remove only this time of day's pin")] = None,
    schedule: Annotated[bool, typer.Option("--schedule", help="remove every time of day's pin")] = False,
    config: ConfigOption = None,
    unit: UnitOption = None,
) -> None:
    """Let the tuner switch this deployment again (the all-day pin; --period or --schedule: the
    time-of-day pins, and the daemon switches back when a removed pin was in force)."""
    if period is not None and schedule:
        raise UsageError("give --period or --schedule, not both")
    _, deployment = deployment_of(config, unit)
    if period is None and not schedule:
        old = clear_pin(deployment.unit)
        console.print(f"unpinned {deployment.unit} (was {old.profile})" if old else f"{deployment.unit} was not pinned",
                      highlight=False)
        return
    gone: dict[Period, Pin] = clear_period_pins(deployment.unit, None if period is None else (period,))
    if not gone:
        console.print(f"{deployment.unit} had no {'time-of-day pins' if schedule else f'pin in the {period}'}",
                      highlight=False)
        return
    shown = ", ".join(f"{name} {p.profile}" for name, p in gone.items())
    console.print(f"unpinned {deployment.unit}'s {shown}", highlight=False)
