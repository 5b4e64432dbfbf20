"""The model built from a live cluster's metadata and platform.yaml, and isolation after a broker
failure (the dead broker's replicas move to tagged brokers only), without Kafka."""

from __future__ import annotations

import pytest

from conveyor.config import parse_platform
from conveyor.ops.balance import IsolationError, plan
from conveyor.ops.balance.live import Metadata, PartitionMetadata, build_model
from conveyor.ops.balance.loads import PartitionLoad

PLATFORM = parse_platform({
    "clusters": {
        "central": {"role": "read", "brokers": 4, "racks": ["r1", "r2", "r3", "r1"], "tags": {"money": [2, 3, 4]}},
        "edge": {"role": "writable", "brokers": 1},
    },
    "topics": {
        "payments": {"partitions": 4, "replication_factor": 2, "isolation": "money", "clusters": ["central"]},
        "clicks": {"partitions": 4, "replication_factor": 1},
    },
})


def _metadata(live: list[int], partitions: dict) -> Metadata:
    racks = {1: "r1", 2: "r2", 3: "r3", 4: "r1", 5: "r2"}
    return Metadata({b: racks[b] for b in live},
                    {tp: PartitionMetadata(tuple(r), r[0] if r[0] in live else None, tuple(b for b in r if b in live))
                     for tp, r in partitions.items()})


def test_tags_come_from_the_platform_file_and_isolation_only_where_the_cluster_has_the_tag() -> None:
    metadata = _metadata([1, 2, 3, 4, 5], {("payments", 0): (2, 3), ("clicks", 0): (1,)})
    model = build_model(metadata, PLATFORM, "central", {("payments", 0): PartitionLoad(10.0, 20.0, 300)})
    assert {b.id: sorted(b.tags) for b in model.brokers} == {1: [], 2: ["money"], 3: ["money"], 4: ["money"], 5: []}
    assert dict(model.isolation) == {"payments": "money"}
    payments = next(p for p in model.partitions if p.topic == "payments")
    assert (payments.bytes_in, payments.bytes_out, payments.size, payments.leader) == (10.0, 20.0, 300, 2)
    edge = build_model(_metadata([1], {("payments", 0): (1,)}), PLATFORM, "edge", {})
    assert dict(edge.isolation) == {}  # edge has no broker tagged money


def test_after_a_tagged_broker_dies_its_isolated_replicas_go_to_the_other_tagged_brokers_only() -> None:
    partitions = {("payments", n): r for n, r in enumerate([(4, 2), (3, 4), (2, 4), (4, 3)])}
    partitions |= {("clicks", n): (1 + n % 3,) for n in range(6)}
    model = build_model(_metadata([1, 2, 3], partitions), PLATFORM, "central", {})  # broker 4 is down
    result = plan(model)
    final = {**{tp: r for tp, r in partitions.items()}, **result.assignment()}
    for n in range(4):
        assert set(final[("payments", n)]) == {2, 3}, final  # never broker 1, which lacks the tag
    assert all(4 not in r for r in final.values())
    assert [row.broker for row in result.before if not row.live] == [4]
    assert 4 not in {row.broker for row in result.after}


def test_too_few_tagged_brokers_left_fails_with_the_tag_and_the_brokers() -> None:
    partitions = {("payments", 0): (4, 2)}
    model = build_model(_metadata([1, 2], partitions), PLATFORM, "central", {})  # 3 and 4 are down
    with pytest.raises(IsolationError) as failure:
        plan(model)
    assert failure.value.goal == "Isolation" and failure.value.brokers == (2,)
    assert "'money'" in str(failure.value)
