"""``conveyor config check``: validate platform.yaml and summarise it."""

from __future__ import annotations

from typing import Any

import typer

from conveyor.cli.common import (DEFAULT_PLATFORM, Column, OutputFormat, OutputOption, PlatformOption, Section,
                                 platform_from, render)
from conveyor.config import Platform

app = typer.Typer(rich_markup_mode="markdown", help="The platform file.", no_args_is_help=True)


def _clusters(model: Platform) -> list[dict[str, Any]]:
    rows = []
    for name, cluster in model.clusters.items():
        topics = []
        for topic_name, topic in model.topics_on(name).items():
            replication, min_isr = topic.replication_on(cluster)
            topics.append({"topic": topic_name, "partitions": topic.partitions, "replication_factor": replication,
                           "min_insync_replicas": min_isr})
        rows.append({"cluster": name, "role": cluster.role.value,
                     "brokers": cluster.brokers if cluster.is_local else None,
                     "bootstrap": None if cluster.is_local else cluster.bootstrap,
                     "racks": list(cluster.racks), "topics": topics})
    return rows


def _brokers(row: dict[str, Any]) -> str:
    return str(row["brokers"]) if row["bootstrap"] is None else f"existing: {row['bootstrap']}"


def _topics(row: dict[str, Any]) -> str:
    return ", ".join(f"{t['topic']} ({t['partitions']} x {t['replication_factor']}, {t['min_insync_replicas']})"
                     for t in row["topics"])


@app.command()
def check(platform: PlatformOption = DEFAULT_PLATFORM, output: OutputOption = OutputFormat.table) -> None:
    """Validate the platform file; print every problem with its path, or a summary."""
    model = platform_from(platform)
    columns = (Column("cluster"), Column("role"), Column("brokers", cell=_brokers),
               Column("racks", cell=lambda r: ",".join(r["racks"])),
               Column("topics (partitions x RF, min ISR)", cell=_topics))
    render(output, Section("clusters", f"{platform}: valid", columns, _clusters(model)), platform=model.name)
