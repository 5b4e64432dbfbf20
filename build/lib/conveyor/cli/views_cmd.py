"""``conveyor views get``: read the real-time views in Redis (the Python API is
:mod:`conveyor.pipeline.realtime.views`)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import typer
from conveyor.cli.common import (DEFAULT_PLATFORM, Column, OutputFormat, OutputOption, PlatformOption, Section, render,
                                 say)

app = typer.Typer(help="Read the real-time views that `conveyor pipeline realtime` keeps in Redis.",
                  no_args_is_help=True)


def _moment(text: str) -> datetime:
    for parse in (datetime.fromisoformat, lambda t: datetime.strptime(t, "%Y%m%dT%H%M%SZ")):
        try:
            return parse(text)
        except ValueError:
            continue
    raise typer.BadParameter(f"{text!r} is not a time such as 2025-03-01T12:03 (UTC)", param_hint="--window")


@app.command()
def get(
    view: Annotated[str, typer.Argument(help="A view of pipeline.realtime.views.")],
    key: Annotated[str, typer.Argument(help="The values of the view's key fields, comma-separated, in key order.")],
    window: Annotated[list[str] | None, typer.Option(
        "--window", "-w", help="A time (UTC) inside the window to show (repeatable); default: the latest windows.")] = None,
    last: Annotated[int, typer.Option("--last", "-n", min=1, help="Without --window: how many latest windows.")] = 5,
    platform: PlatformOption = DEFAULT_PLATFORM,
    output: OutputOption = OutputFormat.table,
) -> None:
    """A key's counters per window, with the view's ratios (CTR) computed on read. Windows with no
    data are left out."""
    from conveyor.cli.common import platform_from
    from conveyor.pipeline.realtime.views import read_view, recent_windows

    model = platform_from(platform)
    windows = [_moment(w) for w in window] if window else recent_windows(model, view, last)
    rows = read_view(model, view, key.split(","), windows)
    if not rows:
        say(output, f"{view} {key}: no counters in the {len(windows)} window(s) asked for")
    counters = sorted({name for row in rows for name in row.counters})
    ratios = sorted({name for row in rows for name in row.ratios})
    columns = (Column("window start (UTC)", cell=lambda row: row.window_start.strftime("%Y-%m-%d %H:%M:%S")),
               *(Column(c, cell=lambda row, c=c: f"{row.counters.get(c, 0):,}", justify="right") for c in counters),
               *(Column(r, cell=lambda row, r=r: "-" if row.ratios.get(r) is None else f"{row.ratios[r]:.2%}",
                        justify="right") for r in ratios))
    if rows or output is OutputFormat.json:
        render(output, Section("windows", f"{view} {key}", columns, rows), view=view, key=key)
