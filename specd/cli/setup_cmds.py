"""doctor, import, quickstart: getting a box ready."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from specd.cli import app, console, layout
from specd.cli.common import ConfigOption, JsonOption, UnitOption, deployment_of, print_json
from specd.errors import UsageError


@app.command()
def doctor(config: ConfigOption = None, json_out: JsonOption = False) -> None:
    """What is missing on this box for specd and each profile, and how to fix it."""
    from specd.setup.doctor import run_doctor

    findings = run_doctor(config)
    if json_out:
        print_json([f.__dict__ for f in findings])
    else:
        items = [(f.check, f.ok, f.detail, f.fix) for f in findings]
        for ok, line in layout.findings(items, console.width):  # paths stay whole at any width
            console.print(Text(line, style="" if ok else "red"), highlight=False, soft_wrap=True)
    if not all(f.ok for f in findings):
        raise typer.Exit(1)


@app.command("import")
def import_(
    name: Annotated[str | None, typer.Argument(help="name of the new profile (not with --from-llama-swap)")] = None,
    source: Annotated[str | None, typer.Option(
        "--from", metavar="UNIT|PATH",
        help="an installed unit's name (llama-server@qwen.service for a template instance) or a unit file's "
             "path; default: the deployment's unit")] = None,
    swap_config: Annotated[Path | None, typer.Option(
        "--from-llama-swap", metavar="CONFIG",
        help="a llama-swap config.yaml: one profile per model, named after its model ID")] = None,
    force: Annotated[bool, typer.Option("--force", help="overwrite an existing profile")] = False,
    config: ConfigOption = None,
    unit: UnitOption = None,
    json_out: JsonOption = False,
) -> None:
    """Turn an existing llama-server unit into profile NAME, read as systemd reads it, and say what
    became of each part (typed key, args, env, a default filled in, or not carried)."""
    from rich.table import Table

    from specd.unit.importer import import_unit_report
    from specd.unit.locate import resolve_source

    _, deployment = deployment_of(config, unit)
    if swap_config is not None:
        _import_llama_swap(swap_config, deployment.profiles_dir, force=force, json_out=json_out)
        return
    if name is None:
        raise UsageError("specd import NAME: give the new profile a name (or use --from-llama-swap CONFIG)")
    path = resolve_source(source, deployment.scope) if source else deployment.unit_path
    target, result = import_unit_report(path, deployment.profiles_dir, name, force=force,
                                        unit_name=Path(source).name if source else path.name,
                                        scope="system" if deployment.scope == "system" else "user")
    if json_out:
        print_json({"profile": str(target), "flags_checked": result.checked,
                    "rows": [row.__dict__ for row in result.rows]})
        return
    table = Table(title=f"specd import {name} <- {path}")
    table.add_column("from the unit", overflow="fold")  # paths fold onto the next line, never cut
    table.add_column("became", overflow="fold")
    for row in result.rows:
        table.add_row(row.source, row.became)
    console.print(table)
    if not result.checked:
        console.print(f"note: the flags of {result.data['binary']} could not be checked here (see above); "
                      "`specd show` and the switch's preflight ask the binary", highlight=False)
    console.print(f"wrote {target}; compare with `specd diff {name}`, then `specd switch {name}`", highlight=False)


def _import_llama_swap(config: Path, profiles_dir: Path, *, force: bool, json_out: bool) -> None:
    from rich.table import Table

    from specd.unit.swap_import import import_llama_swap

    outcomes, notes = import_llama_swap(config, profiles_dir, force=force)
    if json_out:
        print_json({"models": [{"model": o.model, "profile": str(o.profile) if o.profile else None,
                                "reason": o.reason, "rows": [r.__dict__ for r in o.result.rows] if o.result else []}
                               for o in outcomes], "not_carried": list(notes)})
    else:
        table = Table("llama-swap model", "profile")
        table.add_column("what specd did", overflow="fold")
        for outcome in outcomes:
            said = ("; ".join(r.became for r in outcome.result.rows if "not carried" in r.became)
                    if outcome.result else "")
            table.add_row(outcome.model, outcome.profile.stem if outcome.profile else "-",
                          said if outcome.profile else f"not imported: {outcome.reason}")
        console.print(table)
        for note in notes:
            console.print(f"config: {note}", highlight=False)
    if not any(o.profile for o in outcomes):
        raise UsageError(f"{config}: no model runs llama-server; nothing was written")


@app.command()
def quickstart(
    stop_after: Annotated[bool, typer.Option(
        "--stop-after", help="stop the demo server (and a private systemd) at the end")] = False,
    stop: Annotated[bool, typer.Option(
        "--stop", help="only stop the private systemd an earlier quickstart left running")] = False,
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
