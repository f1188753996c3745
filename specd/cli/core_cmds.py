"""switch, rollback, status, profiles, show, diff, history: the core commands.

What a command needs is imported when it runs: `specd --help` and `specd status` must not pay
for the switch transaction, the tuner or numpy (benchmarks/cli_startup.py measures it).
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

import typer

from specd.cli import app, console, err_console, styled
from specd.cli.common import (
    ConfigOption,
    JsonOption,
    StrategyOption,
    UnitOption,
    deployment_of,
    print_json,
)
from specd.cli.layout import labelled, table_with_detail
from specd.deploy.slots import StrategyRequest
from specd.errors import SpecdError, StateDbError

if TYPE_CHECKING:
    from specd.deploy.switch import Outcome
    from specd.profiles.config import Deployment


def _report(outcome: Outcome, what: str) -> None:
    for note in outcome.notes:
        console.print(styled("[dim]note:[/] {}", note), highlight=False)
    if outcome.unchanged:
        return
    gen = outcome.generation
    health = outcome.health
    load = f", server load {health.load_s:.1f} s" if health else ""
    how = f"; {gen.strategy}, {gen.slot} slot" if gen.strategy and gen.slot else ""
    console.print(styled("[green]{}[/]: profile [bold]{}[/] is healthy (generation {}; total {} s{}{})", what,
                         gen.profile, gen.id, f"{gen.total_s or 0:.1f}", load, how), highlight=False)


@app.command()
def switch(
    profile: Annotated[str, typer.Argument(help="profile name (a file in profiles_dir, without .toml)")],
    config: ConfigOption = None,
    unit: UnitOption = None,
    json_out: JsonOption = False,
    strategy: StrategyOption = "auto",
) -> None:
    """Render PROFILE into the unit, start it (beside the old server, or in its place), health-gate
    it; revert by itself on failure.

    --json prints one document (docs/json.md) on success and on failure; the exit status stays.
    """
    from specd.context import switcher_for
    from specd.tune.verify import unverified_warning

    _, deployment = deployment_of(config, unit)
    try:
        warning = unverified_warning(deployment, profile)
    except StateDbError:
        warning = None
    if warning:
        err_console.print(styled("[yellow]warning:[/] {}", warning), highlight=False)
    switcher = switcher_for(deployment)
    if not json_out:
        _report(switcher.switch(profile, strategy), "switched")
        return
    _json_operation(deployment, "switch", profile, lambda: switcher.switch(profile, strategy))


def _json_operation(deployment: Deployment, kind: str, profile: str | None, run: Callable[[], Outcome]) -> None:
    """Run a switch or rollback and print its --json document, also when it fails (then re-raise,
    so the message reaches stderr and the exit code stays)."""
    from specd.cli.json_out import dumps, failure_json, outcome_json
    from specd.context import switcher_for

    def active() -> str | None:
        return switcher_for(deployment).active_profile()

    try:
        outcome = run()
    except SpecdError as error:
        typer.echo(dumps(failure_json(error, kind=kind, deployment=deployment, profile=profile,
                                                      active=active())))
        raise
    typer.echo(dumps(outcome_json(outcome, kind=kind, deployment=deployment, active=active())))


@app.command()
def rollback(
    to: Annotated[int | None, typer.Option("--to", help="jump to this generation (see `specd history`)")] = None,
    config: ConfigOption = None,
    unit: UnitOption = None,
    json_out: JsonOption = False,
    strategy: Annotated[StrategyRequest, typer.Option("--strategy", help="as for switch; restart by default")]
    = "restart",
) -> None:
    """Go back to the unit as it was before the last change (repeat to walk further back)."""
    from specd.context import switcher_for
    from specd.deploy.history import History

    _, deployment = deployment_of(config, unit)
    try:
        switcher = switcher_for(deployment)
    except StateDbError as exc:
        if to is not None:
            raise
        err_console.print(styled("[yellow]warning:[/] {}\n{}", exc.message, "rolling back from the .pre-* backups "
                                 "alone; this rollback is not recorded in history"), highlight=False)
        switcher = switcher_for(deployment, history=History.in_memory())
    if json_out:
        _json_operation(deployment, "rollback", None, lambda: switcher.rollback(to, strategy))
        return
    _report(switcher.rollback(to, strategy), "rolled back")


STATUS_UNHEALTHY_EXIT = 3


@app.command()
def status(config: ConfigOption = None, unit: UnitOption = None, json_out: JsonOption = False) -> None:
    """The active profile, the unit's state, the endpoint's health and the daemon. Changes nothing.

    Exit status: 0 healthy; 3 the endpoint is not healthy, the deployment is marked failed or
    stopped, or an interrupted switch awaits `specd recover`.
    """
    from specd.cli.facts import facts_of, pins_row, routing_row
    from specd.context import seams_for
    from specd.daemon.control import daemon_status
    from specd.deploy.status import collect_status

    cfg, deployment = deployment_of(config, unit)
    seams = seams_for(deployment)
    report = collect_status(seams, daemon_status(seams.state, deployment.unit))
    if json_out:
        print_json(report.as_dict() | facts_of(cfg, deployment))
    else:
        daemon = report.daemon
        next_run = f"; next tuning {daemon['next_tuning'][:16].replace('T', ' ')}" if daemon.get("next_tuning") else ""
        slot = f"{report.slot} ({report.slot_unit})" + (f", by {report.strategy}" if report.strategy else "")
        if report.clients_endpoint != report.endpoint:  # a [proxy]: clients use its address, not the server's
            proxy = "specd's proxy" if daemon.get("running") else "specd's proxy; the daemon is not running"
            endpoints = [("clients", f"{report.clients_endpoint} ({proxy})"), ("server", report.endpoint)]
        else:
            endpoints = [("endpoint", report.endpoint)]
        rows = [("unit", report.unit), ("active profile", report.active_profile), ("slot", slot),
                ("state", report.state), ("unit state", report.unit_state), *endpoints,
                ("health", report.health), ("vram", report.vram), ("generation", report.generation),
                ("history", report.history_problem), ("last tuning", report.last_tuning),
                ("pins", pins_row(deployment)), ("routing", routing_row(deployment)),
                ("pending", report.pending),
                ("daemon", str(daemon.get("detail", "")) + next_run)]
        shown = [(label, str(value)) for label, value in rows if value not in (None, "")]
        for line in labelled(shown, console.width):  # paths (env.sh, the unit) stay whole
            typer.echo(line)
    if report.needs_attention:
        raise typer.Exit(STATUS_UNHEALTHY_EXIT)


@app.command()
def recover(config: ConfigOption = None, unit: UnitOption = None) -> None:
    """Finish an interrupted switch or rollback by reverting it (any switch or rollback does this too)."""
    from specd.context import switcher_for

    _, deployment = deployment_of(config, unit)
    switcher = switcher_for(deployment)
    pending = switcher.pending_intent()
    done = switcher.recover()  # a switch's or rollback's intent, or a killed shadow bench's candidate
    if pending is None and done is None:
        console.print(f"nothing to recover: no interrupted operation on {deployment.unit}")
        return
    console.print(done or f"recovered: {deployment.unit} is back on its previous unit")


@app.command()
def profiles(config: ConfigOption = None, unit: UnitOption = None, json_out: JsonOption = False) -> None:
    """Every profile in profiles_dir, whether it validates, and which one is active."""
    from rich.table import Table

    from specd.context import switcher_for
    from specd.deploy.preflight import quick_problems
    from specd.profiles.load import list_profiles, load_profile
    from specd.tune.activity import profile_problems as speculation_problems

    _, deployment = deployment_of(config, unit)
    active = switcher_for(deployment).active_profile()
    listing = list_profiles(deployment.profiles_dir)
    problems = {item.name: [*quick_problems(deployment, load_profile(deployment.profiles_dir, item.name)),
                            *speculation_problems(deployment, item.name)]
                for item in listing if not item.abstract and not item.error}
    if json_out:
        print_json([{"name": p.name, "path": str(p.path), "description": p.description, "abstract": p.abstract,
                     "active": p.name == active, "error": p.error, "problems": problems.get(p.name, [])}
                    for p in listing])
        return
    table = Table("", "profile", "description", "problem")
    for item in listing:
        mark = "*" if item.name == active else ""
        description = item.description + (" (abstract: the others inherit it; never switched to)"
                                          if item.abstract else "")
        table.add_row(mark, item.name, description.strip(), item.error or "; ".join(problems.get(item.name, [])))
    console.print(table)


VramOption = Annotated[bool, typer.Option("--vram", help="the VRAM check in full: each GPU's estimate by part, "
                                          "the split mode's margin and its basis, the verdict")]


@app.command()
def show(profile: str, config: ConfigOption = None, unit: UnitOption = None, json_out: JsonOption = False,
         vram: VramOption = False) -> None:
    """The unit file PROFILE would install (after every preflight check)."""
    from specd.context import main_pid_of, seams_for
    from specd.deploy.preflight import run_preflight, vram_details
    from specd.secrets import mask, mask_argv

    _, deployment = deployment_of(config, unit)
    main_pid = main_pid_of(seams_for(deployment))
    if vram:
        lines, fits = vram_details(deployment, profile, current_main_pid=main_pid)
        if json_out:
            print_json({"profile": profile, "vram": lines, "fits": fits})
        else:
            for line in lines:
                typer.echo(line)
        if not fits:
            raise typer.Exit(2)
        return
    pre = run_preflight(deployment, profile, current_main_pid=main_pid)
    if json_out:  # a key in the unit (in args or env) is shown as `…`: the file itself is written 0600
        print_json({"profile": profile, "argv": mask_argv(pre.argv), "unit": mask(pre.unit_text), "notes": pre.notes})
        return
    typer.echo(mask(pre.unit_text), nl=False)
    for note in pre.notes:
        typer.echo(f"# note: {note}", err=True)


@app.command()
def diff(profile: str, config: ConfigOption = None, unit: UnitOption = None, json_out: JsonOption = False) -> None:
    """Unified diff of the installed unit against what PROFILE would install."""
    import difflib

    from specd.context import main_pid_of, switcher_for
    from specd.deploy.preflight import run_preflight
    from specd.deploy.slots import same_but_port
    from specd.secrets import mask

    _, deployment = deployment_of(config, unit)
    switcher = switcher_for(deployment)
    pre = run_preflight(deployment, profile, current_main_pid=main_pid_of(switcher.seams))
    installed_text = switcher.installed_text()
    installed = installed_text or ""
    serving_path = switcher.serving().unit_path
    # a blue-green switch may have moved the server to the spare port: that is the same profile
    rendered = installed if installed_text and same_but_port(installed_text, pre.unit_text) else pre.unit_text
    lines = difflib.unified_diff(installed.splitlines(keepends=True), rendered.splitlines(keepends=True),
                                 fromfile=str(serving_path), tofile=f"{profile} (rendered)")
    text = mask("".join(lines))
    if json_out:
        print_json({"profile": profile, "unit": deployment.unit, "unit_path": str(serving_path),
                    "installed": installed_text is not None, "differs": installed_text != rendered,
                    "diff": text, "notes": pre.notes})
        return
    typer.echo(text or f"no difference: {deployment.unit} already holds {profile}", nl=False)


@app.command()
def history(
    limit: Annotated[int, typer.Option("--limit", "-n")] = 20,
    events: Annotated[bool, typer.Option("--events", help="daemon and tuner actions instead of generations")]
    = False,
    config: ConfigOption = None,
    unit: UnitOption = None,
    json_out: JsonOption = False,
) -> None:
    """Every generation of the unit: when, which profile, what triggered it, how it went."""
    from specd.context import switcher_for

    _, deployment = deployment_of(config, unit)
    switcher = switcher_for(deployment)
    if events:
        rows = [dict(row) for row in switcher.history.events(deployment.unit, limit)]
        if json_out:
            print_json(rows)
            return
        when_and_kind = [[str(row["at"])[:19].replace("T", " "), str(row["kind"])] for row in rows]
        for line in table_with_detail(["time (UTC)", "kind"], when_and_kind, [str(row["detail"]) for row in rows],
                                      console.width):
            typer.echo(line)
        return
    generations = switcher.history.list(deployment.unit, limit)
    active = switcher.history.active(deployment.unit)
    if json_out:
        print_json([g.as_dict() | {"active": active is not None and g.id == active.id} for g in generations])
        return
    # Slot and strategy columns only when blue-green was used: on a restart-only box they repeat
    # "blue, restart" on every row and squeeze the rest out of an 80-column terminal.
    slots = any(g.slot not in (None, "blue") or g.strategy == "blue-green" for g in generations)
    cells: list[list[str]] = []
    for gen in generations:
        mark = "*" if active is not None and gen.id == active.id else ""
        total = f"{gen.total_s:.1f}" if gen.total_s is not None else ""
        where = [gen.slot or "", gen.strategy or ""] if slots else []
        cells.append([f"{gen.id}{mark}", gen.created_at[5:16].replace("T", " "), gen.kind, gen.profile or "", *where,
                     gen.trigger, gen.outcome, total])
    headers = ["gen", "time (UTC)", "kind", "profile", *(["slot", "strategy"] if slots else []), "trigger", "outcome",
               "s"]
    details = [textwrap.shorten(gen.detail or "", 160, placeholder=" …") for gen in generations]
    for line in table_with_detail(headers, cells, details, console.width):  # never squeezed: the detail gives way
        typer.echo(line)
