"""doctor, import, quickstart: getting a box ready."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from specd.cli import app, console
from specd.cli.common import ConfigOption, JsonOption, UnitOption, deployment_of, print_json
from specd.setup.doctor import run_doctor
from specd.unit.importer import import_unit_report, resolve_source


@app.command()
def doctor(config: ConfigOption = None, json_out: JsonOption = False) -> None:
    """What is missing on this box for specd and each profile, and how to fix it."""
    findings = run_doctor(config)
    if json_out:
        print_json([f.__dict__ for f in findings])
    else:
        table = Table("check", "")
        table.add_column("detail", overflow="fold")  # paths fold onto the next line, never cut
        table.add_column("fix", overflow="fold")
        for finding in findings:
            table.add_row(finding.check, "[green]ok[/]" if finding.ok else "[red]problem[/]", finding.detail,
                          "" if finding.ok else finding.fix)
        console.print(table)
    if not all(f.ok for f in findings):
        raise typer.Exit(1)


@app.command("import")
def import_(
    name: Annotated[str, typer.Argument(help="name of the new profile")],
    source: Annotated[str | None, typer.Option(
        "--from", metavar="UNIT|PATH",
        help="an installed unit's name (llama-server@qwen.service for a template instance) or a unit file's "
             "path; default: the deployment's unit")] = None,
    force: Annotated[bool, typer.Option("--force", help="overwrite an existing profile")] = False,
    config: ConfigOption = None,
    unit: UnitOption = None,
    json_out: JsonOption = False,
) -> None:
    """Turn an existing llama-server unit into profile NAME, read as systemd reads it, and say what
    became of each part (typed key, args, env, a default filled in, or not carried)."""
    _, deployment = deployment_of(config, unit)
    unit_name = source if source and "/" not in source else None
    path = resolve_source(source, deployment.scope) if source else deployment.unit_path
    target, result = import_unit_report(path, deployment.profiles_dir, name, force=force,
                                        unit_name=unit_name or path.name,
                                        scope="system" if deployment.scope == "system" else "user")
    if json_out:
        print_json({"profile": str(target), "rows": [row.__dict__ for row in result.rows]})
        return
    table = Table("from the unit", "became", title=f"specd import {name} <- {path}")
    for row in result.rows:
        table.add_row(row.source, row.became)
    console.print(table)
    console.print(f"wrote {target}; compare with `specd diff {name}`, then `specd switch {name}`", highlight=False)


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
