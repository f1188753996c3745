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
    stop_after: Annotated[bool, typer.Option("--stop-after", help="stop the demo server (and a private systemd) at the end")] = False,
    stop: Annotated[bool, typer.Option("--stop", help="only stop the private systemd an earlier quickstart left running")] = False,
) -> None:
    """Build llama-server and the tiny model, then switch, ask, and roll back for real.

    Writes specd.toml (when there is none) and quickstart.toml under $XDG_CONFIG_HOME/specd. Without a
    systemd --user manager it keeps a private one running and says how to reach and stop it.
    """
    from specd.setup import quickstart as qs

    def say(line: str) -> None:
        console.print(line, highlight=False, markup=False, soft_wrap=True)

    if stop:
        qs.stop_demo(say)
        return
    qs.run_quickstart(say, keep_running=not stop_after)
