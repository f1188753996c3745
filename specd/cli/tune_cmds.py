"""bench, tune, tune-table, verify: measuring profiles and choosing one.

The tuner's modules (and numpy under them) are imported inside the commands: every other `specd`
command, `--help` included, registers these and must not pay for them (benchmarks/cli_startup.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from specd.cli import app as cli_app
from specd.cli import console, err_console, styled
from specd.cli.common import ConfigOption, JsonOption, UnitOption, deployment_of, print_json
from specd.errors import FidelityError, PreflightError, ProfileError, UsageError
from specd.tune.periods import Period

if TYPE_CHECKING:
    from rich.table import Table

    from specd.profiles.config import Deployment
    from specd.tune.bench import Progress as ProgressFn
    from specd.tune.bench import Report, Settings
    from specd.tune.sweep import SweepResult
    from specd.tune.tuner import Decision
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


@contextmanager
def progress_bar(enabled: bool) -> Iterator[ProgressFn | None]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

    if not enabled:
        yield None
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


def _fmt_ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value / 1000.0:.2f} s"


def _bench_table(report: Report) -> Table:
    from rich.table import Table

    data = report.as_json()["cells"]
    table = Table("profile", "n", "wall median [95% CI]", "prefill (no reuse)", "cache_n", "decode tok/s", "accept",
                  "reasoning tok", "VRAM peak", "")
    for name, cell in data.items():
        wall = cell["wall_ms"]
        lo, hi = wall["ci95"]
        vram = cell["vram_peak_bytes"]
        flags = (["early stop"] if cell["stopped_early"] else []) + (["high variance"] if cell["high_variance"]
                                                                     else [])
        table.add_row(name, str(cell["n"]), f"{_fmt_ms(wall['median'])} [{lo / 1000:.2f}-{hi / 1000:.2f}]",
                      f"{_fmt_ms(cell['prefill_ms_median'])} ({_fmt_ms(cell['prefill_ms_no_reuse_median'])})",
                      f"{cell['cache_n_median']:.0f}",
                      "n/a" if cell["decode_tok_s_median"] is None else f"{cell['decode_tok_s_median']:.1f}",
                      "n/a" if cell["acceptance_median"] is None else f"{cell['acceptance_median']:.0%}",
                      "n/a" if cell["reasoning_tokens_median"] is None else f"{cell['reasoning_tokens_median']:.0f}",
                      vram if isinstance(vram, str) else f"{vram / 2**30:.2f} GiB", ", ".join(flags))
    return table


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
    console.print(_bench_table(report))
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


def traffic_line(traffic: dict[str, Any]) -> str:
    """What a bench replayed, in one line: source, size, mix, concurrency, cache reuse, sampling."""
    mix = ", ".join(f"{name} {count}" for name, count in traffic["class_mix"].items())
    sampling = "; ".join(f"{label} x{count}" for label, count in traffic["sampling"].items())
    return (f"workload {traffic['name']} ({traffic['source']}, {traffic['size']} requests: {mix}), "
            f"concurrency {traffic['concurrency']}, cache reuse {'on' if traffic['cache_reuse'] else 'off'} "
            f"({traffic['follow_ups']} follow-up turns), sampling {sampling}")


def _decision_table(decision: Decision) -> Table:
    from rich.table import Table

    table = Table("profile", "n", "wall median", "95% CI", "model (mix)", "")
    for est in decision.estimates:
        mark = "best" if est.profile == decision.best else ("active" if est.profile == decision.active else "")
        table.add_row(est.profile, str(est.n), _fmt_ms(est.median_ms),
                      f"{est.ci_lo_ms / 1000:.2f}-{est.ci_hi_ms / 1000:.2f} s", _fmt_ms(est.model_wall_ms),
                      mark + (" (noisy)" if est.high_variance else ""))
    return table


@cli_app.command()
def tune(
    workload: WorkloadOption = None,
    n: NOption = None,
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
    from specd.context import seams_for, switcher_for
    from specd.profiles.axes import parse_axis
    from specd.profiles.load import load_profile
    from specd.tune.shadow import ShadowTarget, load_notes
    from specd.tune.sweep import sweep_deployment, sweep_json, sweep_sentence
    from specd.tune.tuner import tune_deployment

    cfg, deployment = deployment_of(config, unit)
    if margin is not None and not 0.0 <= margin < 1.0:
        raise UsageError(f"--margin must be between 0 and 1 (0.05 = 5%), not {margin}")
    axes = [parse_axis(text) for text in sweep or ()]
    if axes and len(candidates or ()) > 1:
        raise UsageError("--sweep varies one profile: give at most one --profile (the base)")
    for candidate in candidates or ():
        load_profile(deployment.profiles_dir, candidate)
    shadow_target = ShadowTarget(seams_for(deployment)) if shadow else None
    options: dict[str, Any] = {"workload": workload, "n": n, "margin": margin, "trigger": "tuner",
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
    decision = result.decision
    if shadow_target is not None:  # the live server never left: make the winner live now
        decision = replace(decision, notes=(*decision.notes, *load_notes(result.report, shadow_target.marks)))
        if decision.switch and decision.best:
            switcher_for(deployment, trigger="tuner").switch(decision.best)
        result.final_profile = switcher_for(deployment).active_profile()
    if json_out:
        document = tune_document(deployment, decision.as_json(), result.final_profile, result.report.run_id)
        if swept is not None:
            document["sweep"] = sweep_json(swept)
        print_json(document)
        return
    console.print(_decision_table(decision))
    for sentence in (*decision.crossovers, *decision.notes):
        console.print(styled("[dim]note:[/] {}", sentence), highlight=False)
    console.print(f"measured on {traffic_line(dict(decision.traffic))}", highlight=False)
    console.print(styled("[bold]{}[/] (bench {} s; now on {})", decision.reason, f"{decision.bench_s:.0f}",
                         result.final_profile or "nothing"), highlight=False)
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
            "deployment": {"name": deployment.name, "unit": deployment.unit}, "models": models, **decision,
            "final_profile": final_profile, "bench_run": bench_run}


@cli_app.command("tune-table")
def tune_table(
    files: Annotated[list[Path], typer.Argument(help="`specd tune --json` outputs, one per box")],
    json_out: JsonOption = False,
) -> None:
    """Tuner verdicts from several boxes side by side: one row per box and profile."""
    from rich.table import Table

    from specd.tune.fleet import load_rows

    rows = load_rows(files)
    if json_out:
        print_json([asdict(row) for row in rows])
        return
    table = Table("box", "hardware", "unit", "workload", "profile", "model", "n", "wall median", "95% CI", "")
    for row in rows:
        mark = ", ".join(m for m, on in (("best", row.best), ("active", row.active_after)) if on)
        if row.median_ms is None or row.ci_lo_ms is None or row.ci_hi_ms is None:
            table.add_row(row.box, row.hardware, row.deployment, row.workload, row.profile, row.model or "", "",
                          "", row.verdict, mark)
            continue
        table.add_row(row.box, row.hardware, row.deployment, row.workload, row.profile, row.model or "", str(row.n),
                      _fmt_ms(row.median_ms), f"{row.ci_lo_ms / 1000:.2f}-{row.ci_hi_ms / 1000:.2f} s", mark)
    console.print(table)


@cli_app.command("verify")
def verify_cmd(
    profile: Annotated[str, typer.Argument(help="the profile to check")],
    against: Annotated[str | None, typer.Option("--against", help="the reference (default: autoregressive)")]
    = None,
    config: ConfigOption = None,
    unit: UnitOption = None,
    json_out: JsonOption = False,
) -> None:
    """Compare PROFILE's answers with the reference's at temperature 0: tool calls, JSON, one-token, prose.

    Greedy on purpose, unlike bench and tune (which sample as the traffic does): at temperature 0 a
    faithful speculative profile answers exactly as the reference does.
    """
    from rich.table import Table
    from rich.text import Text

    from specd.context import seams_for
    from specd.profiles.load import load_profile
    from specd.tune import verify as checks
    from specd.tune.bench import DeploymentTarget, restoring
    from specd.tune.recent import captured_bodies

    _, deployment = deployment_of(config, unit)
    reference = against or checks.reference_profile(deployment)
    if reference is None:
        raise UsageError("no reference profile: none is named autoregressive and all of them speculate",
                         hint="pass --against PROFILE")
    for name in (profile, reference):
        load_profile(deployment.profiles_dir, name)
    plain = [name for name in (profile, reference) if not checks.needs_verification(deployment, name)]
    probes = (*checks.BUILTIN_PROBES, *checks.traffic_probes(captured_bodies(deployment)))
    target = DeploymentTarget(deployment, seams=seams_for, trigger="verify")
    try:
        with restoring(target):
            if profile == reference and profile in plain:  # type = "none" is its own reference: no drafts, then
                result = checks.verify_plain(target, profile, probes)
            else:
                result = checks.verify_profiles(target, profile, reference, probes, plain=plain)
    finally:
        target.close()
    checks.save_verification(deployment, result)
    if json_out:
        print_json(result.as_json())
    else:
        table = Table("probe", "kind", "exact", "structure", "edit distance", "detail")
        for check in result.checks:
            verdict = {None: Text("-"), True: Text("ok"), False: Text("FAIL", style="red")}[check.structured_ok]
            table.add_row(check.probe, check.kind, "yes" if check.exact else "no", verdict, str(check.distance),
                          check.detail)
        console.print(table)
        for note in result.notes:
            console.print(styled("[dim]note:[/] {}", note), highlight=False)
        console.print(styled("[bold]{}[/]", result.summary()), highlight=False)
    if result.draft_problems:
        raise FidelityError("; ".join(result.draft_problems),
                            hint="run `specd switch` to it again: specd renders the flag that turns this build's "
                                 "default speculation off (read from its --help)")
    if not result.structured_ok:
        names = ", ".join(c.probe for c in result.failures)
        raise FidelityError(f"{profile} fails the structured checks against {reference}: {names}",
                            hint="the tuner will not switch to it; `specd switch` warns before using it")

