"""The lake's position on the monitoring feed (``conveyor.positions``): ``conveyor.lake.<topic>``.

The real position is the Iceberg snapshot summary of the topic's tables, and the lake reads from
the lowest of them (``conveyor.pipeline.offsets``), so that lowest offset per partition is what it
shows. A run publishes the stored position when it starts and the new one after its commits: a
table rolled back to an earlier snapshot then shows as a lower committed offset, a REWIND in
``conveyor ops lag`` with its amount, before the run lands the range again.
"""

from __future__ import annotations

from collections.abc import Iterable

from conveyor.config import Platform
from conveyor.pipeline.kafka_source import source_cluster
from conveyor.pipeline.offsets import Positions
from conveyor.positions import PositionFeed, group_name, spark_client_id


def lowest(tables: Iterable[Positions | None]) -> dict[int, int]:
    """Per partition, the lowest position among the tables that have one."""
    found: dict[int, int] = {}
    for positions in tables:
        for partition, offset in (positions or {}).items():
            found[partition] = min(offset, found.get(partition, offset))
    return found


def publish_position(platform: Platform, topic: str, tables: Iterable[Positions | None]) -> None:
    positions = lowest(tables)
    if positions:
        feed = PositionFeed(platform, source_cluster(platform), group_name("lake", topic), "iceberg",
                            client_ids=[spark_client_id("lake", topic)])
        try:
            feed.publish_and_wait({(topic, partition): offset for partition, offset in positions.items()})
        finally:
            feed.close()
