"""The producer quota each cluster keeps (``clusters.<n>.producer_quota``; 32 MiB/s per producer on
a logs cluster): a client-id default quota, so Kafka delays a producer past it rather than let one
producer take the brokers from the others. Read and set with Kafka's own kafka-configs, as the
Python client has no quota API; only clusters whose quota Conveyor manages are asked."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from conveyor.config import Platform
from conveyor.kafka_tools import KafkaTools


@dataclass(frozen=True)
class QuotaPlan:
    cluster: str
    #: Bytes per second per producer and broker now; None when no default quota is set.
    current: int | None
    #: What platform.yaml asks for; None for no quota.
    wanted: int | None

    @property
    def in_sync(self) -> bool:
        return self.current == self.wanted


def plan_quotas(platform: Platform, clusters: Iterable[str] | None = None) -> list[QuotaPlan]:
    plans = []
    for name in clusters or platform.clusters:
        managed = platform.cluster(name).managed_producer_quota
        if managed is not None:
            current = KafkaTools(platform, name).default_producer_quota()
            plans.append(QuotaPlan(name, current, managed if managed >= 0 else None))
    return plans


def apply_quotas(platform: Platform, plans: list[QuotaPlan]) -> list[QuotaPlan]:
    """Set every quota not in sync; the plans carried out."""
    changed = [plan for plan in plans if not plan.in_sync]
    for plan in changed:
        KafkaTools(platform, plan.cluster).set_default_producer_quota(plan.wanted)
    return changed
