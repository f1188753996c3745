"""doctor, import, quickstart: getting a box ready."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from specd.cli import app, console
from specd.cli.common import ConfigOption, JsonOption, UnitOption, deployment_of, print_json
from specd.setup.doctor import run_doctor
from specd.unit.importer import import_unit


@app.command()
def doctor(config: ConfigOption = None, json_out: JsonOption = False) -> None:
    """What is missing on this box for specd and each profile, and how to fix it."""
    findings = run_doctor(config)
    if json_out:
        print_json([f.__dict__ for f in findings])
    else:
        table = Table("check", "", "detail", "fix")
        for finding in findings:
            table.add_row(finding.check, "[green]ok[/]" if finding.ok else "[red]missing[/]", finding.detail,
                          "" if finding.ok else finding.fix)
        console.print(table)
    if not all(f.ok for f in findings):
        raise typer.Exit(1)


@app.command("import")
def import_(
    name: Annotated[str, typer.Argument(help="name of the new profile")],
    unit_file: Annotated[Path | None, typer.Option("--from", help="unit file to read (default: the installed unit)")]
    = None,
    force: Annotated[bool, typer.Option("--force", help="overwrite an existing profile")] = False,
    config: ConfigOption = None,
    unit: UnitOption = None,
) -> None:
    """Turn a hand-written llama-server unit's ExecStart/Environment into profile NAME."""
    _, deployment = deployment_of(config, unit)
    source = unit_file or deployment.unit_path
    target = import_unit(source, deployment.profiles_dir, name, force=force)
    console.print(f"wrote {target}; check it with `specd show {name}`", highlight=False)


@app.command()
def quickstart(
    stop_after: Annotated[bool, typer.Option("--stop-after", help="stop the demo server at the end")] = False,
) -> None:
    """Build llama-server and the tiny model, then switch, check, and roll back for real."""
    from specd.setup.quickstart import run_quickstart

    run_quickstart(lambda line: console.print(line, highlight=False, markup=False), keep_running=not stop_after)
    typer.echo("next: `specd status`, `specd profiles`, `specd doctor`")
