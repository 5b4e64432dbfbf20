"""``conveyor lake status``: what the lake holds per topic, and how far it is complete."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import typer
from rich.filesize import decimal
from rich.table import Table

from conveyor.cli.common import DEFAULT_PLATFORM, PlatformOption, console, platform_from
from conveyor.cli.pipeline_cmd import TopicsOption, start_spark
from conveyor.pipeline.completeness import floor_hour, is_complete

app = typer.Typer(help="The data lake (Apache Iceberg) that `conveyor pipeline lake` fills.", no_args_is_help=True)


def _when(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S") if moment else "never"


@app.command()
def status(platform: PlatformOption = DEFAULT_PLATFORM, topics: TopicsOption = None) -> None:
    """Per topic: rows, files and size in the lake, quarantined records, data lost to retention,
    the last run, the last complete hour, whether yesterday is complete (MISSION.md: yesterday must
    land by 01:00), and the offsets still waiting in Kafka."""
    from conveyor.pipeline.lake import lake_topics
    from conveyor.pipeline.status import lake_status

    model = platform_from(platform)
    lake_topics(model, topics)
    spark = start_spark(model, "conveyor-lake-status")
    with console.status("reading the lake's tables"):
        statuses = lake_status(spark, model, topics)
    yesterday_last_hour = floor_hour(datetime.now(timezone.utc)).replace(hour=0) - timedelta(hours=1)
    table = Table(title=f"lake: {model.pipeline.warehouse} (times in UTC)")
    for column in ("topic", "rows", "files", "size", "quarantined", "lost", "last run", "complete through",
                   "yesterday", "pending"):
        table.add_column(column)
    for s in statuses:
        complete = f"{s.last_complete_hour:%Y-%m-%d %H}:59" if s.last_complete_hour else "nothing yet"
        lost = f"[bold red]{s.lost:,} in {s.gaps} gap(s)[/]" if s.lost else "0"
        landed = is_complete(yesterday_last_hour, s.last_complete_hour)
        yesterday = "[green]landed[/]" if landed else "[yellow]not yet[/]"
        pending = f"{s.pending:,}" if s.pending is not None else "Kafka unreachable"
        table.add_row(s.topic, f"{s.rows:,}", f"{s.files:,}", decimal(s.bytes), f"{s.quarantined:,}", lost,
                      _when(s.last_run), complete, yesterday, pending)
    console.print(table)
