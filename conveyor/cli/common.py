"""What every command shares: the --platform option, the console, and error reporting."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from conveyor.config import DEFAULT_PLATFORM_FILE, Platform, load_platform
from conveyor.service import Endpoint

# Rich assumes 80 columns when output is not a terminal, which truncates tables in CI logs and
# pipes; there, lines may be as long as they need.
console = Console(width=None if sys.stdout.isatty() else 200)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 200)

PlatformOption = Annotated[
    Path,
    typer.Option(
        "--platform",
        "-p",
        envvar="CONVEYOR_PLATFORM",
        help="The platform file that describes clusters, topics and services.",
        show_default=True,
        # load_platform says what is wrong with the file in one line; Click's own check would
        # answer an unreadable file with a usage box instead.
        readable=False,
    ),
]
DEFAULT_PLATFORM = Path(DEFAULT_PLATFORM_FILE)


def platform_from(path: Path) -> Platform:
    return load_platform(path)


MetricsPortOption = Annotated[int | None, typer.Option(
    "--metrics-port", help="Serve /metrics and /healthz on this port (0: one the OS picks).")]
MetricsHostOption = Annotated[str, typer.Option(
    "--metrics-host", help="Address /metrics and /healthz listen on (0.0.0.0 for a Prometheus elsewhere).")]
DEFAULT_METRICS_HOST = "127.0.0.1"


def endpoint(host: str, port: int | None) -> Endpoint:
    return Endpoint(host=host, port=port)


YesOption = Annotated[bool, typer.Option("--yes", help="Confirm without asking (for scripts).")]


def confirm(name: str, what: str, yes: bool) -> None:
    """A typed confirmation before a command changes a cluster: the operator types ``name`` (a
    cluster's or the platform's), or passes ``--yes``; anything else exits 1 having changed nothing."""
    if yes:
        return
    answer = typer.prompt(f"type {name} to {what}", default="", show_default=False)
    if answer != name:
        err_console.print("not confirmed; nothing was changed")
        raise typer.Exit(1)
