"""web-token: the status page's action token."""

from __future__ import annotations

from typing import Annotated

import typer

from specd.cli import app, console, styled
from specd.cli.common import ConfigOption
from specd.profiles.config import load_config


@app.command("web-token")
def web_token(
    config: ConfigOption = None,
    url_only: Annotated[bool, typer.Option("--url", help="print only the page's address with the token")] = False,
) -> None:
    """Print the status page's token (created 0600 if missing) and its address.

    Opening the printed address logs the browser in (the token travels in the #fragment, which the
    browser never sends); without the token the page is read-only.
    """
    from specd.web.auth import read_or_create_token, token_path

    cfg = load_config(config)
    path = token_path(cfg)
    token = read_or_create_token(path)
    listen = cfg.daemon.http_listen
    url = f"http://{listen}/#token={token}" if listen else None
    if url_only:
        typer.echo(url or "")
        return
    typer.echo(token)
    console.print(styled("[dim]kept in {} (0600)[/]", path), highlight=False)
    if url:
        console.print(f"open {url}", highlight=False, soft_wrap=True)
    else:
        off = 'the page is off: set [daemon] http_listen = "127.0.0.1:8090" in specd.toml'
        console.print(styled("[dim]{}[/]", off), highlight=False)
