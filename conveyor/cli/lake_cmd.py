"""``conveyor lake status``: what the lake holds per topic, and how far it is complete."""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime, timedelta, timezone
from typing import Any

import typer
from rich.filesize import decimal

from conveyor.cli.common import (DEFAULT_PLATFORM, Column, OutputFormat, OutputOption, PlatformOption, Section,
                                 err_console, platform_from, render)
from conveyor.cli.pipeline_cmd import TopicsOption, start_spark
from conveyor.pipeline.completeness import floor_hour, is_complete

app = typer.Typer(help="The data lake (Apache Iceberg) that `conveyor pipeline lake` fills.", no_args_is_help=True)


def _when(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S") if moment else "never"


def _complete(s: dict[str, Any]) -> str:
    return f"{s['last_complete_hour']:%Y-%m-%d %H}:59" if s["last_complete_hour"] else "nothing yet"


_COLUMNS = (
    Column("topic"), Column("rows", cell=lambda s: f"{s['rows']:,}"), Column("files", cell=lambda s: f"{s['files']:,}"),
    Column("size", cell=lambda s: decimal(s["bytes"])), Column("quarantined", cell=lambda s: f"{s['quarantined']:,}"),
    Column("lost", cell=lambda s: f"[bold red]{s['lost']:,} in {s['gaps']} gap(s)[/]" if s["lost"] else "0"),
    Column("last run", cell=lambda s: _when(s["last_run"])), Column("complete through", cell=_complete),
    Column("yesterday", cell=lambda s: "[green]landed[/]" if s["yesterday_complete"] else "[yellow]not yet[/]"),
    Column("pending", cell=lambda s: f"{s['pending']:,}" if s["pending"] is not None else "Kafka unreachable"))


@app.command()
def status(platform: PlatformOption = DEFAULT_PLATFORM, topics: TopicsOption = None,
           output: OutputOption = OutputFormat.table) -> None:
    """Per topic: rows, files and size in the lake, quarantined records, data lost to retention,
    the last run, the last complete hour, whether yesterday is complete (yesterday must land by
    01:00), and the offsets still waiting in Kafka."""
    from conveyor.pipeline.catalog import describe
    from conveyor.bus.registry import with_granted
    from conveyor.pipeline.tables import lake_topics
    from conveyor.pipeline.status import lake_status

    model = with_granted(platform_from(platform))  # requested topics the lake lands too
    lake_topics(model, topics)
    spark = start_spark(model, "conveyor-lake-status")
    with err_console.status("reading the lake's tables"):
        statuses = lake_status(spark, model, topics)
    yesterday_last_hour = floor_hour(datetime.now(timezone.utc)).replace(hour=0) - timedelta(hours=1)
    rows = [{**asdict(s), "yesterday_complete": is_complete(yesterday_last_hour, s.last_complete_hour)}
            for s in statuses]
    render(output, Section("topics", f"lake: {describe(model)} (times in UTC)", _COLUMNS, rows),
           catalog=describe(model), warehouse=model.pipeline.catalog.warehouse)
