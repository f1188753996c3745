"""The `specd` command: parsing and output only. Each submodule registers its commands on `app`.

Exit codes: 0 success, 2 bad input (nothing changed), 1 an operation failed (the message says what
state the box is in), 75 another specd operation holds the lock. No traceback reaches a user;
set SPECD_DEBUG=1 to see one.
"""

from __future__ import annotations

import logging
import os
import signal
import sys

import typer
from rich.console import Console

from specd.errors import SpecdError

app = typer.Typer(
    name="specd",
    help="Switch, guard and tune llama-server's speculative-decoding profiles under systemd.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,
)
console = Console()
err_console = Console(stderr=True)
log = logging.getLogger("specd")


def _register_commands() -> None:
    from specd.cli import core_cmds, setup_cmds  # noqa: F401  (registers on import)

    for optional in ("daemon_cmds", "tune_cmds"):
        try:
            __import__(f"specd.cli.{optional}")
        except ModuleNotFoundError as exc:
            if exc.name != f"specd.cli.{optional}":
                raise


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> None:
    logging.basicConfig(
        level=logging.DEBUG if os.environ.get("SPECD_DEBUG") else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    _register_commands()
    signal.signal(signal.SIGTERM, _interrupt)  # SIGTERM mid-switch reverts and resumes traffic, as Ctrl-C does
    try:
        app()
    except SpecdError as exc:
        log.debug("command failed", exc_info=True)
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False, markup=True, soft_wrap=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)
    except SystemExit:
        raise
    except Exception as exc:  # the last line of defence: no traceback for users
        if os.environ.get("SPECD_DEBUG"):
            raise
        err_console.print(f"[bold red]internal error:[/] {type(exc).__name__}: {exc} (SPECD_DEBUG=1 shows more)")
        sys.exit(1)
