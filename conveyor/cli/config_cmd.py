"""``conveyor config check``: validate platform.yaml and summarise it."""

from __future__ import annotations

import typer
from rich.table import Table

from conveyor.cli.common import DEFAULT_PLATFORM, PlatformOption, console, platform_from

app = typer.Typer(rich_markup_mode="markdown", help="The platform file.", no_args_is_help=True)


@app.command()
def check(platform: PlatformOption = DEFAULT_PLATFORM) -> None:
    """Validate the platform file; print every problem with its path, or a summary."""
    model = platform_from(platform)
    table = Table(title=f"{platform}: valid")
    for column in ("cluster", "role", "brokers", "racks", "topics (partitions x RF, min ISR)"):
        table.add_column(column)
    for name, cluster in model.clusters.items():
        topics = ", ".join(
            "{} ({} x {}, {})".format(t, topic.partitions, *topic.replication_on(cluster))
            for t, topic in model.topics_on(name).items()
        )
        brokers = str(cluster.brokers) if cluster.is_local else f"existing: {cluster.bootstrap}"
        table.add_row(name, cluster.role.value, brokers, ",".join(cluster.racks), topics)
    console.print(table)
