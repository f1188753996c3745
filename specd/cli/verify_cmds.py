"""tune-table and verify: tuner verdicts side by side, and a profile's answers against the reference's."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from specd.cli import app as cli_app
from specd.cli import console
from specd.cli.common import ConfigOption, JsonOption, UnitOption, deployment_of, print_json
from specd.cli.tune_cmds import fmt_ms
from specd.context import seams_for
from specd.errors import FidelityError, UsageError
from specd.profiles.load import load_profile
from specd.tune.bench import DeploymentTarget, restoring
from specd.tune.fleet import load_rows
from specd.tune.recent import captured_bodies
from specd.tune.verify import (
    BUILTIN_PROBES,
    needs_verification,
    reference_profile,
    save_verification,
    traffic_probes,
    verify_plain,
    verify_profiles,
)


@cli_app.command("tune-table")
def tune_table(
    files: Annotated[list[Path], typer.Argument(help="`specd tune --json` outputs, one per box")],
    json_out: JsonOption = False,
) -> None:
    """Tuner verdicts from several boxes side by side: one row per box and profile."""
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
                      fmt_ms(row.median_ms), f"{row.ci_lo_ms / 1000:.2f}-{row.ci_hi_ms / 1000:.2f} s", mark)
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
    _, deployment = deployment_of(config, unit)
    reference = against or reference_profile(deployment)
    if reference is None:
        raise UsageError("no reference profile: none is named autoregressive and all of them speculate",
                         hint="pass --against PROFILE")
    for name in (profile, reference):
        load_profile(deployment.profiles_dir, name)
    plain = [name for name in (profile, reference) if not needs_verification(deployment, name)]
    probes = (*BUILTIN_PROBES, *traffic_probes(captured_bodies(deployment)))
    target = DeploymentTarget(deployment, seams=seams_for, trigger="verify")
    try:
        with restoring(target):
            if profile == reference and profile in plain:  # type = "none" is its own reference: no drafts, then
                result = verify_plain(target, profile, probes)
            else:
                result = verify_profiles(target, profile, reference, probes, plain=plain)
    finally:
        target.close()
    save_verification(deployment, result)
    if json_out:
        print_json(result.as_json())
    else:
        table = Table("probe", "kind", "exact", "structure", "edit distance", "detail")
        for check in result.checks:
            verdict = {None: "-", True: "ok", False: "[red]FAIL[/]"}[check.structured_ok]
            table.add_row(check.probe, check.kind, "yes" if check.exact else "no", verdict, str(check.distance),
                          check.detail)
        console.print(table)
        for note in result.notes:
            console.print(f"[dim]note:[/] {note}", highlight=False)
        console.print(f"[bold]{result.summary()}[/]", highlight=False)
    if result.draft_problems:
        raise FidelityError("; ".join(result.draft_problems),
                            hint="run `specd switch` to it again: specd renders the flag that turns this build's "
                                 "default speculation off (read from its --help)")
    if not result.structured_ok:
        names = ", ".join(c.probe for c in result.failures)
        raise FidelityError(f"{profile} fails the structured checks against {reference}: {names}",
                            hint="the tuner will not switch to it; `specd switch` warns before using it")

