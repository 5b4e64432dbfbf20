"""What every copier of a route's worker shares: the platform, the route, and the partition counts
the worker's discovery loop keeps current."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from conveyor.config import Platform, ReplicationMode, Route
from conveyor.replicate import plan
from conveyor.replicate.metrics import ReplicateMetrics
from conveyor.replicate.plan import SourcePartition


@dataclass
class RouteState:
    """What every copier of a worker shares, kept current by the worker's discovery loop."""

    platform: Platform
    name: str
    route: Route
    worker_id: str
    metrics: ReplicateMetrics
    #: Partition counts per topic on the source and on the destination.
    source_counts: dict[str, int] = field(default_factory=dict)
    destination_counts: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def bucket_partitions(self, bucket: int, mode: ReplicationMode) -> set[SourcePartition]:
        """The source partitions of ``bucket`` whose topics are copied in ``mode``."""
        with self.lock:
            ready = {t: n for t, n in self.source_counts.items()
                     if self.destination_counts.get(t, 0) > 0 and self.copy_mode(t) is mode}
        return plan.partitions_by_bucket(ready, self.route.buckets)[bucket]

    def copy_mode(self, topic: str) -> ReplicationMode:
        return self.platform.copy_mode(self.name, topic)

    def modes(self) -> set[ReplicationMode]:
        """The modes the route's topics are copied in now: one copier per mode for each bucket."""
        with self.lock:
            topics = list(self.source_counts)
        return {self.copy_mode(topic) for topic in topics}
