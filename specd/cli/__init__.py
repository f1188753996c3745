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
from typing import Any

# httpx imports its own command-line tool (httpx._main: pygments, rich's syntax and progress) when
# click and rich are installed, as they are here; specd never runs it, and every command would pay
# for it (a quarter of `specd status`'s start-up: benchmarks/results/cli-startup.md). Marking the
# module absent makes httpx's own `except ImportError` fallback take over.
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]

import typer
from rich.console import Console
from rich.markup import escape
from rich.text import Text

from specd.errors import SpecdError

app = typer.Typer(
    name="specd",
    help="Switch, guard and tune llama-server's speculative-decoding profiles under systemd.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,
)
# Markup off: a profile's "[proxy]", "[speculative]" or a path in a message or a table cell is text,
# never a style tag rich would swallow. specd's own styling goes through `styled`.
console = Console(markup=False)
err_console = Console(stderr=True, markup=False)
log = logging.getLogger("specd")


def styled(template: str, *values: object) -> Text:
    """A line with specd's styling (`template`: rich markup with `{}` for each value) around values
    printed exactly as they are."""
    return Text.from_markup(template.format(*(escape(str(value)) for value in values)))


def _register_commands() -> None:
    from specd.cli import core_cmds, setup_cmds  # noqa: F401  (registers on import)

    for optional in ("daemon_cmds", "tune_cmds", "pin_cmds", "levels_cmds", "web_cmds", "route_cmds"):
        try:
            __import__(f"specd.cli.{optional}")
        except ModuleNotFoundError as exc:
            if exc.name != f"specd.cli.{optional}":
                raise


_METAVARS = {"str": "TEXT", "int": "N", "int range": "N", "float": "NUMBER", "float range": "NUMBER",
             "path": "PATH", "file": "PATH", "directory": "DIR", "list[str]": "TEXT"}


def readable_metavars(command: Any) -> Any:
    """Help that reads like a man page: `specd switch PROFILE`, `--n N`, `--config PATH`, instead of
    the Python types typer prints (<str>, <list[str]>, <int range>, {profile})."""
    for param in command.params:
        if getattr(param, "is_flag", False) or not hasattr(param, "display_type"):
            continue
        if param.param_type_name == "argument":
            label = (param.name or "value").upper()
            param.metavar = label
            param.display_type = lambda ctx: ""
            usage = label if param.required else f"[{label}]"
            param._usage_display_name = lambda usage=usage, many=param.nargs != 1: usage + ("..." if many else "")
        else:
            typed = str(param.display_type(None)).strip("<>")
            label = param.metavar or _METAVARS.get(typed, typed if "|" in typed else typed.upper())  # choices as typed
            param.display_type = lambda ctx, label=label: label
    for sub in getattr(command, "commands", {}).values():
        readable_metavars(sub)
    return command


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            print(f"specd {version('specd')}")
        except PackageNotFoundError:
            print("specd (not installed as a package)")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="print specd's version and exit")) -> None:
    """Switch, guard and tune llama-server's speculative-decoding profiles under systemd."""


def command() -> Any:
    """The whole `specd` command, every subcommand registered, with readable help."""
    _register_commands()
    return readable_metavars(typer.main.get_command(app))


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> None:
    logging.basicConfig(
        level=logging.DEBUG if os.environ.get("SPECD_DEBUG") else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    signal.signal(signal.SIGTERM, _interrupt)  # SIGTERM mid-switch reverts and resumes traffic, as Ctrl-C does
    try:
        command()(prog_name="specd")
    except SpecdError as exc:
        log.debug("command failed", exc_info=True)
        # styled: a message naming a table ("[vllm] max_model_len", "[proxy]") is text, not rich markup
        err_console.print(styled("[bold red]error:[/] {}", exc), highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)
    except SystemExit:
        raise
    except Exception as exc:  # the last line of defence: no traceback for users
        if os.environ.get("SPECD_DEBUG"):
            raise
        err_console.print(styled("[bold red]internal error:[/] {}: {} (SPECD_DEBUG=1 shows more)",
                                 type(exc).__name__, exc))
        sys.exit(1)
