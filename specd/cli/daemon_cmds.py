"""daemon, traffic: the long-running guard and what it has seen of clients."""

from __future__ import annotations

import re
import time
from typing import Annotated, Any

import typer
from rich.table import Table

from specd.cli import app, console, styled
from specd.cli.common import ConfigOption, JsonOption, UnitOption, deployment_of, print_json
from specd.errors import UsageError
from specd.profiles.config import load_config

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_UNIT_SECONDS = {"s": 1, "": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str) -> float:
    """'90s', '30m', '24h', '7d', '2w' (a bare number is seconds)."""
    match = _DURATION.match(text)
    if match is None:
        raise UsageError(f"--since {text!r}: expected a duration like 30m, 24h or 7d")
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]


@app.command()
def daemon(config: ConfigOption = None, unit: UnitOption = None) -> None:
    """Run the specd daemon in the foreground (units/specd.service runs it under systemd).

    Health-monitors every configured unit (restart after repeated failures, rollback right after a
    switch), validates profile edits, records hand edits of the unit, serves [proxy], keeps traffic
    records, runs the nightly tuning, and serves Prometheus metrics on its control socket.
    """
    from specd import context
    from specd.daemon.app import run_daemon

    cfg = load_config(config)
    deployments = [cfg.deployment(unit)] if unit else list(cfg.deployments)
    page = None
    if cfg.daemon.http_listen:
        from specd.web.app import StatusPage
        from specd.web.auth import check_exposure

        check_exposure(cfg)  # before anything listens: an exposed page without a token file is refused
        page = StatusPage
    raise typer.Exit(run_daemon(cfg, deployments, state=context.state_dir(), make_seams=context.seams_for,
                                page_factory=page, jobs=context.tuner_jobs()))


def _histogram_rows(buckets: list[dict[str, Any]]) -> list[tuple[str, int]]:
    rows = [(f"{b['lo']}-{b['hi'] - 1}" if b["hi"] is not None else f"{b['lo']}+", int(b["count"]))
            for b in buckets]
    while rows and rows[-1][1] == 0:
        rows.pop()
    return rows


def _print_histogram(title: str, buckets: list[dict[str, Any]]) -> None:
    rows = _histogram_rows(buckets)
    if not rows:
        return
    table = Table(title=title, title_justify="left")
    table.add_column("tokens", justify="right")
    table.add_column("requests", justify="right")
    table.add_column("")
    peak = max(count for _, count in rows) or 1
    for label, count in rows:
        table.add_row(label, str(count), "#" * round(30 * count / peak))
    console.print(table)


@app.command("traffic")
def traffic_cmd(
    since: Annotated[str, typer.Option("--since", help="how far back: 30m, 24h, 7d")] = "24h",
    config: ConfigOption = None,
    unit: UnitOption = None,
    json_out: JsonOption = False,
) -> None:
    """What clients sent: request count, prompt/output lengths, task classes, acceptance per profile."""
    from specd import context
    from specd.traffic import records as traffic

    _, deployment = deployment_of(config, unit)
    window = parse_duration(since)
    conn = traffic.open_db(context.state_dir().db)
    try:
        summary = traffic.summarize(conn, time.time() - window, unit=deployment.unit)
    finally:
        conn.close()
    if json_out:
        print_json(summary)
        return
    console.print(styled("[bold]{}[/], last {}: [bold]{}[/] requests ({} failed, {} streamed)", deployment.unit, since,
                         summary["requests"], summary["failed"], summary["streamed"]), highlight=False)
    if summary["requests"] == 0 and not summary["sampled_counters"]:
        console.print("no traffic recorded: enable [proxy] in specd.toml, or start llama-server with --metrics "
                      "and run `specd daemon`", highlight=False, markup=False)
        return
    _print_histogram("prompt length", summary["prompt_tokens_hist"])
    _print_histogram("output length", summary["output_tokens_hist"])
    if summary["class_mix"]:
        total = sum(summary["class_mix"].values())
        mix = ", ".join(f"{name} {100 * n / total:.0f}%" for name, n in sorted(summary["class_mix"].items()))
        console.print(f"task classes: {mix}", highlight=False)
    table = Table(title="per profile", title_justify="left")
    for column in ("profile", "requests", "acceptance", "decode tok/s"):
        table.add_column(column, justify="left" if column == "profile" else "right")
    for profile, entry in sorted(summary["acceptance"].items()):
        rate = "-" if entry["rate"] is None else f"{100 * entry['rate']:.0f}%"
        speed = "-" if entry["decode_tok_s"] is None else f"{entry['decode_tok_s']:.1f}"
        table.add_row(profile, str(entry["requests"]), rate, speed)
    for profile, totals in sorted(summary["sampled_counters"].items()):
        rate = "-" if totals["acceptance_rate"] is None else f"{100 * totals['acceptance_rate']:.0f}%"
        table.add_row(f"{profile} (sampled /metrics)", "-", rate, "-")
    console.print(table)
