"""route: serve each task class with the resident profile that fits it (specd.routing).

`specd route` shows the state and the table; `--dry-run` what the table would do on the recorded
traffic; `on` / `off` start and stop the companion servers; `learn` benches the candidates on the
recorded mix and writes the table (the night's run does the same after its bench).

What a command needs is imported when it runs: `specd --help` must not pay for the tuner's bench or
the companions' preflight (tests/unit/test_cli_startup.py)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from specd import context
from specd.cli import app as cli_app
from specd.cli import console
from specd.cli.common import ConfigOption, JsonOption, UnitOption, deployment_of, print_json

if TYPE_CHECKING:
    from specd.profiles.config import Deployment
    from specd.routing.dryrun import DryRun, Recorded
    from specd.routing.residents import Routing
    from specd.routing.state import RoutingState
    from specd.traffic.taskclass import TaskClass

route_app = typer.Typer(help="Route each request to the resident profile that fits its task class and the load.",
                        no_args_is_help=False, rich_markup_mode=None)
cli_app.add_typer(route_app, name="route")

DaysOption = Annotated[float, typer.Option("--days", help="recorded traffic of the last DAYS days")]


def _task_class(value: str | None) -> TaskClass | None:
    from specd.traffic.taskclass import TASK_CLASSES

    return next((c for c in TASK_CLASSES if c == value), None)


def recorded(deployment: Deployment, days: float) -> list[Recorded]:
    """The proxy's answered chat requests of the last `days` days, as the dry run reads them."""
    from specd.routing.dryrun import Recorded
    from specd.traffic import records as traffic

    conn = traffic.open_db(context.state_dir().db)
    try:
        rows = traffic.fetch_records(conn, time.time() - days * 86400, deployment.unit)
    finally:
        conn.close()
    return [Recorded(_task_class(r.task_class), r.profile, r.total_ms) for r in rows
            if r.status == 200 and r.endpoint.endswith("completions") and r.total_ms > 0]


def state_document(deployment: Deployment, routing: RoutingState) -> dict[str, Any]:
    from specd.routing.table import describe

    return {"unit": deployment.unit, **routing.as_json(), "describe": describe(routing.table)}


def _print_dry_run(found: DryRun, days: float) -> None:
    if not found.requests:
        console.print(f"no recorded requests in the last {days:g} days: nothing to route on paper "
                      "(the proxy records traffic when the daemon runs with [proxy])", highlight=False)
        return
    mix = ", ".join(f"{c} {n}" for c, n in found.by_class.items())
    console.print(f"{found.requests} recorded requests ({mix}), {found.recorded_ms / 1000:.1f} s of wall clock "
                  "as served", highlight=False)
    sent = ", ".join(f"{n} to {p}" for p, n in sorted(found.sent.items(), key=lambda kv: -kv[1]))
    console.print(f"the table would send {sent}", highlight=False)
    for profile, span in sorted(found.single.items(), key=lambda kv: kv[1].ms):
        console.print(f"  {profile} for everything: {span.ms / 1000:.1f} s "
                      f"({span.lo_ms / 1000:.1f}-{span.hi_ms / 1000:.1f})", highlight=False)
    console.print(f"  routed: {found.routed.ms / 1000:.1f} s ({found.routed.lo_ms / 1000:.1f}-"
                  f"{found.routed.hi_ms / 1000:.1f})", highlight=False)
    gain = found.gain()
    if gain is not None:
        console.print(f"expected gain over the best single profile ({found.best_single}): {gain[0]:+.1%} "
                      f"(between {gain[1]:+.1%} and {gain[2]:+.1%} with every ratio at the ends of its 95% "
                      "interval); requests alone, as the table's ratios are: load is not replayed", highlight=False)
    if found.unpriced:
        console.print(f"[dim]note:[/] {found.unpriced} request(s) counted at what they took (no route for their "
                      "class, or no ratio for the profile that served them)", highlight=False)


@route_app.callback(invoke_without_command=True)
def route(
    ctx: typer.Context,
    dry_run_flag: Annotated[bool, typer.Option("--dry-run", help="what the table would do on the recorded traffic "
                                                                  "and the expected gain; changes nothing")] = False,
    days: DaysOption = 7.0,
    config: ConfigOption = None,
    unit: UnitOption = None,
    json_out: JsonOption = False,
) -> None:
    """Routing's state and table (read-only); --dry-run: what it would do on the recorded traffic."""
    if ctx.invoked_subcommand is not None:
        return
    from specd.cli.facts import routing_row
    from specd.routing.dryrun import dry_run
    from specd.routing.state import read_state
    from specd.routing.table import describe

    _, deployment = deployment_of(config, unit)
    routing = read_state(context.state_dir(), deployment.unit)
    if dry_run_flag:
        profiles = list(dict.fromkeys([*routing.table.profiles(),
                                       *(p for r in routing.table.routes.values() for p in r.ratios)]))
        found = dry_run(recorded(deployment, days), routing.table, profiles)
        if json_out:
            print_json({"unit": deployment.unit, "table": routing.table.as_json(), **found.as_json()})
        else:
            for line in describe(routing.table):
                console.print(line, highlight=False)
            _print_dry_run(found, days)
        return
    if json_out:
        print_json(state_document(deployment, routing))
        return
    console.print(f"routing for {deployment.unit}: {routing_row(deployment)}", highlight=False)
    if routing.note:
        console.print(f"[dim]last change:[/] {routing.note}", highlight=False)
    if routing.probe is not None:
        console.print(f"[dim]per-request draft settings:[/] {routing.probe.get('verdict')}: "
                      f"{routing.probe.get('detail')}", highlight=False)
    for line in describe(routing.table):
        console.print(line, highlight=False)
    if routing.table.source:
        console.print(f"[dim]learned on:[/] {routing.table.source}", highlight=False)


@route_app.command("on")
def route_on(
    profiles: Annotated[list[str] | None, typer.Option(
        "--profile", help="a profile to keep resident (repeat it; default: [routing] profiles, else the table's)")]
    = None,
    config: ConfigOption = None,
    unit: UnitOption = None,
    json_out: JsonOption = False,
) -> None:
    """Start a companion server for each routed profile beside the serving one (health-gated; each must
    fit) and let the proxy route; or, where the binary honours per-request draft settings, one server."""
    from specd.cli.facts import routing_row

    _, deployment = deployment_of(config, unit)
    routing = context.routing_for(deployment)
    state = routing.on(profiles or ())
    _changed(deployment, routing, state, json_out, f"routing on for {deployment.unit}: {routing_row(deployment)}")


def _changed(deployment: Deployment, routing: Routing, state: RoutingState, json_out: bool, headline: str) -> None:
    if json_out:
        print_json({**state_document(deployment, state), "notes": routing.notes})
        return
    console.print(headline, highlight=False)
    for note in routing.notes:
        console.print(f"[dim]{note}[/]", highlight=False)


@route_app.command("off")
def route_off(config: ConfigOption = None, unit: UnitOption = None, json_out: JsonOption = False) -> None:
    """One server again: the proxy stops routing, each companion finishes its requests and stops."""
    _, deployment = deployment_of(config, unit)
    routing = context.routing_for(deployment)
    state = routing.off()
    _changed(deployment, routing, state, json_out,
             f"routing off for {deployment.unit}: the serving profile answers every class")


@route_app.command("learn")
def route_learn(
    profiles: Annotated[list[str] | None, typer.Argument(help="profiles to bench (default: the candidates)")] = None,
    workload: Annotated[str | None, typer.Option("--workload", help="recent (recorded traffic), a built-in "
                                                                    "name or a JSONL file")] = None,
    n: Annotated[int | None, typer.Option("--n", help="requests per profile")] = None,
    dry_run_flag: Annotated[bool, typer.Option("--dry-run", help="print the table; keep the old one")] = False,
    config: ConfigOption = None,
    unit: UnitOption = None,
    json_out: JsonOption = False,
) -> None:
    """Bench the candidates on the recorded mix (switching the live server to each, as `specd bench`
    does) and write the routing table: each class's route moves only on clear paired evidence."""
    from specd.routing.table import describe
    from specd.tune.bench import DeploymentTarget, Settings, run_bench
    from specd.tune.pins import pin_in_force
    from specd.tune.recent import resolve_workload
    from specd.tune.routes import learn as learn_table
    from specd.tune.tuner import candidate_profiles

    cfg, deployment = deployment_of(config, unit)
    settings = Settings(n=n or cfg.tuner.n)
    chosen = resolve_workload(workload or cfg.tuner.workload, deployment, settings.n, None)
    names = candidate_profiles(cfg, deployment, profiles or ())
    target = DeploymentTarget(deployment, seams=context.seams_for, trigger="bench")
    try:
        report = run_bench(target, names, chosen, settings)
    finally:
        target.close()
    routing = context.routing_for(deployment)
    previous = routing.state().table
    pin = pin_in_force(deployment.unit, time.time())
    learned = learn_table(report.results, previous, active=target.active(), margin=cfg.tuner.margin,
                          source=f"`specd route learn`: {chosen.name}, {len(chosen.requests)} requests, "
                                 f"{settings.n} per profile", now=time.time(), pinned=pin.profile if pin else None)
    if not dry_run_flag:
        routing.set_table(learned.table, learned.sentence())
    if json_out:
        print_json({"unit": deployment.unit, "saved": not dry_run_flag, "sentence": learned.sentence(),
                    "table": learned.table.as_json(), "notes": report.notes})
        return
    for line in describe(learned.table):
        console.print(line, highlight=False)
    console.print(("table kept (dry run): " if dry_run_flag else "table saved: ") + learned.sentence(),
                  highlight=False)
