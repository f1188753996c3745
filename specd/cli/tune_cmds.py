"""bench and tune: measuring profiles and choosing one (tune-table and verify: verify_cmds.py).

The tuner's modules (and numpy under them) are imported inside the commands: every other `specd`
command, `--help` included, registers these and must not pay for them (benchmarks/cli_startup.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from specd.cli import app as cli_app
from specd.cli import console, err_console, styled
from specd.cli.common import ConfigOption, JsonOption, UnitOption, deployment_of, print_json
from specd.cli.tune_tables import print_bench_table, print_decision, traffic_line
from specd.errors import PreflightError, ProfileError, SpecdError, UsageError
from specd.tune.periods import Period

if TYPE_CHECKING:
    from specd.profiles.config import Deployment
    from specd.tune.bench import Progress as ProgressFn
    from specd.tune.bench import Report, Settings
    from specd.tune.shadow import ShadowTarget
    from specd.tune.sweep import SweepResult
    from specd.tune.workloads import Workload

WorkloadOption = Annotated[str | None, typer.Option(
    "--workload", "-w", help="recent (from recorded traffic), a built-in name (code, prose, ...) or a JSONL file")]
NOption = Annotated[int | None, typer.Option(
    "--n", min=1, help="requests per profile (default: [tuner] n in specd.toml, else 10)")]
MaxTokensOption = Annotated[int | None, typer.Option("--max-tokens", min=1, help="cap every request's max_tokens")]
ConcurrencyOption = Annotated[int | None, typer.Option(
    "--concurrency", "-c",
    help="replay every request at this many in flight (default: each at the level it met in the traffic)")]
CacheReuseOption = Annotated[bool | None, typer.Option(
    "--cache-reuse/--no-cache-reuse",
    help="prompt cache on or off (default: on when the traffic continues conversations)")]
TemperatureOption = Annotated[float | None, typer.Option(
    "--temperature", help="force this temperature, e.g. 0 for greedy (default: each request's own sampling)")]
PeriodOption = Annotated[Period | None, typer.Option(
    "--period", help="with --workload recent: only the traffic of this time of day")]
ShadowOption = Annotated[bool, typer.Option(
    "--shadow", help="bench in the free slot beside the live server, which keeps serving (both must fit)")]


def progress_lines(started: float | None = None) -> ProgressFn:
    """Progress as plain lines on stderr (a log, a pipe): one when a profile starts, one per block measured."""
    begin = time.monotonic() if started is None else started

    def line(profile: str, done: int, planned: int) -> None:
        at = f"[{time.monotonic() - begin:4.0f} s]"
        if done == 0:
            err_console.print(f"{at} {profile}: switching in and warming up", highlight=False)
        else:
            err_console.print(f"{at} {profile}: {done} requests measured (at most {planned})", highlight=False)

    return line


@contextmanager
def progress_bar(enabled: bool) -> Iterator[ProgressFn | None]:
    """A live bar on a terminal; plain lines otherwise, so a log shows progress from the start."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

    if not enabled:
        yield None
        return
    if not err_console.is_terminal:
        yield progress_lines()
        return
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=err_console, transient=True)
    tasks: dict[str, TaskID] = {}

    def update(profile: str, done: int, planned: int) -> None:
        if profile not in tasks:
            tasks[profile] = bar.add_task(profile, total=planned)
        bar.update(tasks[profile], completed=done)

    with bar:
        yield update


@cli_app.command()
def bench(
    profiles: Annotated[list[str] | None, typer.Argument(help="profiles to bench (default: the candidates)")] = None,
    workload: WorkloadOption = None,
    n: NOption = None,
    max_tokens: MaxTokensOption = None,
    concurrency: ConcurrencyOption = None,
    cache_reuse: CacheReuseOption = None,
    temperature: TemperatureOption = None,
    period: PeriodOption = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="write the wall-clock vs output-length chart (PNG)")]
    = None,
    shadow: ShadowOption = False,
    config: ConfigOption = None,
    unit: UnitOption = None,
    json_out: JsonOption = False,
) -> None:
    """Switch to each profile (health-gated), warm up, replay the workload; restore the original at the end.

    With --shadow each profile runs in the free slot instead, beside the live server, which keeps
    serving; samples taken while live traffic ran are marked, re-sent, and left out when possible."""
    from specd.context import seams_for
    from specd.profiles.load import load_profile
    from specd.tune import activity
    from specd.tune.bench import DeploymentTarget, Settings, run_bench
    from specd.tune.benchstore import save_report
    from specd.tune.recent import resolve_workload
    from specd.tune.tuner import candidate_profiles
    from specd.tune.verify import fingerprint, needs_verification

    cfg, deployment = deployment_of(config, unit)
    settings = Settings(n=n or cfg.tuner.n, max_tokens=max_tokens, concurrency=concurrency, cache_reuse=cache_reuse,
                        temperature=temperature)
    chosen = resolve_workload(workload or cfg.tuner.workload, deployment, settings.n, period)
    names = candidate_profiles(cfg, deployment, profiles or ())
    for name in names:
        load_profile(deployment.profiles_dir, name)
    if shadow:
        report = _shadow_bench(deployment, names, chosen, settings, not json_out)
        back = "the live server served throughout"
    else:
        target = DeploymentTarget(deployment, seams=seams_for, trigger="bench")
        try:
            with progress_bar(not json_out) as progress:
                report = run_bench(target, names, chosen, settings, progress)
        finally:
            target.close()
        back = f"back on {target.active() or 'nothing'}"
    seen = activity.judge_report(report, lambda name: needs_verification(deployment, name))
    report.notes.extend(activity.notes(seen.values()))
    save_report(report, deployment.unit, settings)
    activity.save(deployment.unit, seen.values(), {name: fingerprint(deployment, name) for name in seen})
    if plot is not None:
        from specd.tune.plot import plot_wall_vs_output

        plot_wall_vs_output(report.results, plot, title=f"{deployment.name}: workload {chosen.name}")
    if json_out:
        print_json(report.as_json())
        return
    print_bench_table(report)
    for note in report.notes:
        console.print(styled("[dim]note:[/] {}", note), highlight=False)
    console.print(f"bench run {report.run_id}: {traffic_line(report.traffic)}; {report.rounds} rounds, "
                  f"{report.switches} switches, {report.elapsed_s:.0f} s; {back}",
                  highlight=False)


def _shadow_bench(deployment: Deployment, names: list[str], workload: Workload, settings: Settings,
                  show_progress: bool) -> Report:
    """Bench in the free slot; the report compares clean samples only when each profile kept enough."""
    from specd.context import seams_for
    from specd.tune.bench import bench_profiles
    from specd.tune.shadow import ShadowTarget, clean_only, load_notes

    with ShadowTarget(seams_for(deployment)) as target, progress_bar(show_progress) as progress:
        report = bench_profiles(target, names, workload, settings, progress)
    if not report.benched():
        raise PreflightError("shadow bench: no profile could be benched beside the live server\n"
                             + "\n".join(report.notes), hint="bench without --shadow (it switches the live server)")
    compared, note = clean_only(report, target.marks, settings.floor)
    compared.notes.extend([*load_notes(report, target.marks), note])
    return compared


def engines_of(deployment: Deployment, names: Iterable[str]) -> dict[str, str]:
    """Each profile's engine, as its file says now ("?" for one that no longer loads)."""
    from specd.profiles.load import load_profile

    engines: dict[str, str] = {}
    for name in names:
        try:
            engines[name] = load_profile(deployment.profiles_dir, name).engine
        except ProfileError:
            engines[name] = "?"
    return engines


def _bench_target(deployment: Deployment, shadow: bool, dry_run: bool, names: list[str],
                  announce: bool) -> tuple[ShadowTarget | None, list[str]]:
    """Where to bench, and what to say first (on stderr at once, so a log shows it). A dry run benches in the
    free slot when every profile fits there beside the live server; otherwise it switches the live server,
    and says so before it starts."""
    target, said = _where(deployment, shadow, dry_run, names)
    if announce:
        for line in said:
            err_console.print(line, highlight=False)
        err_console.print(f"tune: benching on {'the free slot' if target is not None else deployment.unit}; "
                          "progress follows", highlight=False)
    return target, said


def _where(deployment: Deployment, shadow: bool, dry_run: bool,
           names: list[str]) -> tuple[ShadowTarget | None, list[str]]:
    from specd.context import seams_for
    from specd.tune.shadow import ShadowTarget

    if shadow or not dry_run:
        return (ShadowTarget(seams_for(deployment)) if shadow else None), []
    why_not = ""
    try:
        target: ShadowTarget | None = ShadowTarget(seams_for(deployment))
    except SpecdError as exc:
        target, why_not = None, str(exc).splitlines()[0]
    try:
        live = [target.live_profile] if target is not None and target.live_profile else []
        for name in dict.fromkeys([*live, *names]):
            if target is not None:
                target.check(name)
    except SpecdError as exc:
        assert target is not None
        target.close()
        target, why_not = None, str(exc).splitlines()[0]
    if target is not None:
        return target, [("dry run: benched in the free slot beside the live server, which kept serving; "
                        "nothing was switched")]
    return None, [(f"dry run: the free slot cannot hold the bench ({why_not}); the bench SWITCHES the live server "
                  "to each candidate and back: clients see restarts, and `specd history` lists the bench's "
                  "generations (trigger bench; `specd rollback` passes over them)")]


@cli_app.command()
def tune(
    workload: WorkloadOption = None,
    n: NOption = None,
    max_n: Annotated[int | None, typer.Option(
        "--max-n", min=1, help="the most requests per profile while the evidence is undecided (default 32 x n; [tuner] "
        "budget_minutes ends it first in practice)")]
    = None,
    max_tokens: MaxTokensOption = None,
    concurrency: ConcurrencyOption = None,
    cache_reuse: CacheReuseOption = None,
    temperature: TemperatureOption = None,
    period: PeriodOption = None,
    verify: Annotated[bool, typer.Option("--verify/--no-verify",
                                         help="gate the switch on `specd verify` (default on)")] = True,
    margin: Annotated[float | None, typer.Option(
        "--margin", help="required gain, 0.05 = 5% (default: [tuner] margin in specd.toml, else 0.05)")]
    = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="decide only; end on the original profile")] = False,
    candidates: Annotated[list[str] | None, typer.Option("--profile", "-p", help="candidate (repeatable)")] = None,
    shadow: ShadowOption = False,
    sweep: Annotated[list[str] | None, typer.Option(
        "--sweep", help="vary a [speculative] key of one profile (the active one, or --profile NAME): "
                        "draft_n_max=2..8, draft_p_min=0.5,0.75 (repeatable: every combination); "
                        "a winner is written as a new profile file")] = None,
    config: ConfigOption = None,
    unit: UnitOption = None,
    json_out: JsonOption = False,
) -> None:
    """Bench the candidates on the workload and switch to the best wall clock if it wins clearly."""
    from specd.context import seams_for
    from specd.profiles.axes import parse_axis
    from specd.profiles.load import load_profile
    from specd.tune.shadow import make_winner_live
    from specd.tune.sweep import sweep_deployment, sweep_json, sweep_sentence
    from specd.tune.tuner import candidate_profiles, tune_deployment

    cfg, deployment = deployment_of(config, unit)
    if margin is not None and not 0.0 <= margin < 1.0:
        raise UsageError(f"--margin must be between 0 and 1 (0.05 = 5%), not {margin}")
    axes = [parse_axis(text) for text in sweep or ()]
    if axes and len(candidates or ()) > 1:
        raise UsageError("--sweep varies one profile: give at most one --profile (the base)")
    for candidate in candidates or ():
        load_profile(deployment.profiles_dir, candidate)
    shadow_target, said = _bench_target(deployment, shadow, dry_run and not axes,
                                        candidate_profiles(cfg, deployment, candidates or ()), announce=not json_out)
    options: dict[str, Any] = {"workload": workload, "n": n, "max_n": max_n, "margin": margin, "trigger": "tuner",
                               "max_tokens": max_tokens, "concurrency": concurrency, "cache_reuse": cache_reuse,
                               "temperature": temperature, "period": period, "verify": verify}
    swept: SweepResult | None = None
    try:
        with progress_bar(not json_out) as progress:
            if axes:
                swept = sweep_deployment(cfg, deployment, axes, seams=seams_for,
                                         base=candidates[0] if candidates else None,
                                         target=shadow_target, dry_run=dry_run, progress=progress,
                                         budget_s=60.0 * cfg.tuner.budget_minutes, **options)
                result = swept.tune
            else:
                result = tune_deployment(cfg, deployment, seams=seams_for, dry_run=dry_run,
                                         candidates=candidates or (), progress=progress, target=shadow_target,
                                         **options)
    finally:
        if shadow_target is not None:
            shadow_target.close()
    if shadow_target is not None:  # the live server never left: make the winner live now
        result = make_winner_live(result, shadow_target)
    decision = replace(result.decision, notes=(*said, *result.decision.notes))
    if json_out:
        document = tune_document(deployment, decision.as_json(), result.final_profile, result.report.run_id)
        if swept is not None:
            document["sweep"] = sweep_json(swept)
        print_json(document)
        return
    print_decision(decision, result.final_profile, engines_of(deployment, [e.profile for e in decision.estimates]))
    if swept is not None:
        console.print(sweep_sentence(swept), highlight=False)


def tune_document(deployment: Deployment, decision: dict[str, Any], final_profile: str | None,
                  bench_run: int | None) -> dict[str, Any]:
    """`specd tune --json`: the decision plus what makes it comparable across boxes (docs/json.md)."""
    from specd.deploy.history import now_iso
    from specd.profiles.load import load_profile
    from specd.setup.box import box_identity
    from specd.tune.fleet import TUNE_SCHEMA

    models: dict[str, str | None] = {}
    for name in [*decision["estimates"], *decision.get("left_out", {})]:
        try:
            model = load_profile(deployment.profiles_dir, name).model
        except ProfileError:
            model = None
        models[name] = Path(model).name if model else None
    return {"schema": TUNE_SCHEMA, "at": now_iso(), "box": box_identity().as_json(),
            "deployment": {"name": deployment.name, "unit": deployment.unit}, "models": models,
            "engines": engines_of(deployment, models), **decision,
            "final_profile": final_profile, "bench_run": bench_run}


from specd.cli import verify_cmds as _verify_cmds  # noqa: F401 - registers tune-table and verify
