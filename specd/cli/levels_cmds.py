"""tune-levels: the best profile at each concurrency level, and the one that loses least over the mix."""

from __future__ import annotations

from typing import Annotated

import typer

from specd.cli import app as cli_app
from specd.cli import console
from specd.cli.common import ConfigOption, JsonOption, UnitOption, deployment_of, print_json
from specd.cli.tune_cmds import MaxTokensOption, NOption, PeriodOption, WorkloadOption, progress_bar
from specd.errors import UsageError
from specd.tune.periods import Period


@cli_app.command("tune-levels")
def tune_levels(
    profiles: Annotated[list[str] | None, typer.Argument(help="profiles to compare (default: the candidates)")] = None,
    levels: Annotated[str | None, typer.Option(
        "--levels", metavar="N,N,...", help="concurrency levels to bench, e.g. 1,4,8 (default: the 3 levels "
                         "the recorded traffic met most, weighted by its requests)")] = None,
    workload: WorkloadOption = None,
    n: NOption = None,
    max_tokens: MaxTokensOption = None,
    period: PeriodOption = None,
    config: ConfigOption = None,
    unit: UnitOption = None,
    apply: Annotated[bool, typer.Option(
        "--apply", help="pin each time of day the traffic was recorded in to the best profile at its typical level "
                        "(`specd pin NAME --period`); the daemon switches when each period begins")] = False,
    json_out: JsonOption = False,
) -> None:
    """Bench the profiles at each concurrency level; say the best per level and the single profile that
    loses least over the traffic's mix. Switches nothing: the original profile is back at the end
    (with --apply, the daemon switches by time of day from then on)."""
    from rich.table import Table

    from specd.context import seams_for
    from specd.profiles.load import load_profile
    from specd.tune.bench import DeploymentTarget, Settings
    from specd.tune.levels import bench_levels, levels_of, parse_levels, schedule_of
    from specd.tune.pins import clear_period_pins, set_period_pin
    from specd.tune.recent import recorded_levels_by_period, resolve_workload
    from specd.tune.tuner import candidate_profiles

    cfg, deployment = deployment_of(config, unit)
    settings = Settings(n=n or cfg.tuner.n, max_tokens=max_tokens)
    chosen = resolve_workload(workload or cfg.tuner.workload, deployment, settings.n, period)
    shares = parse_levels(levels) if levels else levels_of(chosen.facts().concurrency_levels)
    by_period = (recorded_levels_by_period(deployment) if (workload or cfg.tuner.workload) == "recent"
                 else chosen.facts().concurrency_by_period)
    if apply and not by_period:
        raise UsageError(f"--apply: the workload {chosen.name} records no time of day",
                         hint="it needs recorded traffic: --workload recent (the proxy records it)")
    names = candidate_profiles(cfg, deployment, profiles or ())
    for name in names:
        load_profile(deployment.profiles_dir, name)
    target = DeploymentTarget(deployment, seams=seams_for, trigger="bench")
    try:
        with progress_bar(not json_out) as progress:
            plan = bench_levels(target, names, chosen, settings, shares, progress)
    finally:
        target.close()
    schedule = schedule_of(plan, by_period)
    if apply and schedule:
        clear_period_pins(deployment.unit)
        for period_name, profile in schedule.items():
            set_period_pin(deployment.unit, period_name, profile)
    if json_out:
        print_json(plan.as_json() | {"workload": chosen.name, "back_on": target.active(), "levels_by_period": by_period,
                                     "schedule": schedule, "applied": apply and bool(schedule)})
        return
    table = Table("in flight", "share", *plan.levels[0].medians_ms, "best", title=f"workload {chosen.name}")
    for choice in plan.levels:
        table.add_row(str(choice.level), f"{choice.share:.0%}",
                      *(f"{ms / 1000:.2f} s" for ms in choice.medians_ms.values()), choice.best)
    table.add_row("regret", "", *(f"{100 * plan.regret[p]:.1f}%" for p in plan.levels[0].medians_ms), plan.single)
    console.print(table)
    console.print(plan.sentence(), highlight=False)
    console.print(f"nothing was switched; back on {target.active() or 'nothing'}", highlight=False)
    _say_schedule(schedule, by_period, apply)


def _say_schedule(schedule: dict[Period, str], by_period: dict[str, int], applied: bool) -> None:
    if not by_period:
        return
    if not schedule:
        console.print("one profile is the best at every time of day's typical level: nothing to schedule",
                      highlight=False)
        return
    shown = ", ".join(f"{period} ({by_period[period]} in flight) {profile}" for period, profile in schedule.items())
    if applied:
        console.print(f"pinned by time of day: {shown}; the daemon switches when each period begins "
                      "(`specd unpin --schedule` removes them)", highlight=False)
    else:
        console.print(f"by time of day: {shown}; `--apply` pins them and the daemon switches when each period begins",
                      highlight=False)
