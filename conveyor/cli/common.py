"""What every command shares: the --platform option, the console, and error reporting."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from conveyor.config import DEFAULT_PLATFORM_FILE, Platform, load_platform

console = Console()
err_console = Console(stderr=True)

PlatformOption = Annotated[
    Path,
    typer.Option(
        "--platform",
        "-p",
        envvar="CONVEYOR_PLATFORM",
        help="The platform file that describes clusters, topics and services.",
        show_default=True,
    ),
]
DEFAULT_PLATFORM = Path(DEFAULT_PLATFORM_FILE)


def platform_from(path: Path) -> Platform:
    return load_platform(path)
