"""Options and helpers shared by the command modules."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from specd.deploy.slots import StrategyRequest
from specd.profiles.config import Config, Deployment, load_config

ConfigOption = Annotated[
    Path | None, typer.Option("--config",
                              help="specd.toml (default: $SPECD_CONFIG, then $XDG_CONFIG_HOME/specd/specd.toml)")
]
UnitOption = Annotated[str | None, typer.Option("--unit", help="which configured unit (when there are several)")]
JsonOption = Annotated[bool, typer.Option("--json", help="machine-readable output")]
StrategyOption = Annotated[StrategyRequest, typer.Option(
    "--strategy",
    help="blue-green: start the new server beside the old one and flip the proxy (no wait); restart: in "
         "place (clients wait for the load); auto: blue-green when the proxy runs and both fit")]


def deployment_of(config_path: Path | None, unit: str | None) -> tuple[Config, Deployment]:
    config = load_config(config_path)
    return config, config.deployment(unit)


def print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, default=str))
