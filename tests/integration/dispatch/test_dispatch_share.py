"""The share-group (KIP-932) backend against real brokers, through the same gRPC API and client:
30 clients over two nodes, redelivery with the broker's delivery count, dead letters."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conveyor import kafka
from conveyor.config import Platform
from conveyor_sdk.subscriber import Message, Retry, Subscriber, locate
from conveyor.dispatch.server import DispatchNode
from tests.conftest import eventually, read_topic
from tests.dispatchkit import (
    MAILER_TOKEN,
    Ledger,
    produce,
    start_node,
    thirty_clients_read_everything,
    topic_maker,
)
from tests.dispatchkit import nodes  # noqa: F401 (a fixture)

pytestmark = pytest.mark.integration


@pytest.fixture
def setup(platform_file: Path, platform_data: dict[str, Any], provisioned: Platform,
          topic_factory: Callable[..., str]) -> Callable[..., tuple[Platform, str]]:
    """A fresh 3-partition topic on central, declared for mailer, served by the share backend."""
    return topic_maker(platform_file, platform_data, topic_factory, backend="share")


def sample(node: DispatchNode, name: str, topic: str, group: str) -> float:
    return node.metrics.registry.get_sample_value(name, {"topic": topic, "group": group}) or 0.0


def test_thirty_clients_on_two_share_nodes_get_every_message_once(setup, nodes) -> None:
    platform, topic = setup()
    a, b = start_node(platform), start_node(platform)
    nodes.extend([a, b])
    group = f"mailer.{uuid.uuid4().hex[:6]}"
    seeds = [a.advertise, b.advertise]
    eventually(lambda: set(locate(seeds, topic, group, MAILER_TOKEN)) == set(seeds), 60,
               "discovery to name both nodes (the share group has no owner per partition)")
    sent = set(produce(platform, topic, 3000))

    def subscribe(client: int, ledger: Ledger) -> Subscriber:
        return Subscriber(topic, group, lambda m: ledger.delivered(client, m.partition, m.offset, m.value),
                          nodes=seeds, token=MAILER_TOKEN, on_committed=ledger.committed, relocate_every=1.0)

    thirty_clients_read_everything(sent, subscribe, 120)  # as long as the classic backend's
    delivered = {n.advertise: sample(n, "conveyor_dispatch_delivered_total", topic, group) for n in (a, b)}
    assert sum(delivered.values()) == len(sent)
    assert sum(sample(n, "conveyor_dispatch_acked_total", topic, group) for n in (a, b)) == len(sent)


def test_nacks_come_back_with_the_brokers_delivery_count_and_poison_is_dead_lettered(setup, nodes) -> None:
    platform, topic = setup(max_attempts=3)
    node = start_node(platform)
    nodes.append(node)
    sent = set(produce(platform, topic, 100))
    poison = {b"13", b"42"}
    attempts: dict[bytes, list[int]] = {}
    ledger = Ledger()

    def handler(message: Message) -> None:
        ledger.delivered(0, message.partition, message.offset, message.value)
        attempts.setdefault(message.value, []).append(message.attempt)
        if message.value in poison:
            raise RuntimeError("cannot handle this one")
        if message.value == b"7" and message.attempt == 1:
            raise Retry(0.5)

    group = f"mailer.{uuid.uuid4().hex[:6]}"
    dead_topic = f"{topic}.{group}.dead"
    with Subscriber(topic, group, handler, 4, nodes=[node.advertise], token=MAILER_TOKEN,
                    on_committed=ledger.committed, relocate_every=1.0):
        eventually(lambda: ledger.confirmed_values() >= sent - poison
                   and sample(node, "conveyor_dispatch_dead_lettered_total", topic, group) == 2, 90,
                   "everything acked or dead-lettered")
    assert attempts[b"7"] == [1, 2], "a nacked message comes back with the broker's next delivery count"
    assert all(attempts[v] == [1, 2, 3] for v in poison)
    assert ledger.confirmed_values() == sent - poison
    dead = read_topic(platform, "central", dead_topic)
    assert sorted(m.value() for m in dead) == sorted(poison)
    headers = dict(dead[0].headers())
    assert headers["conveyor-dead-letter-reason"] == b"nacked"
    assert headers["conveyor-dead-letter-attempts"] == b"3"
    assert headers["conveyor-dead-letter-group"] == group.encode()
    assert sample(node, "conveyor_dispatch_share_released_total", topic, group) == 5  # 7 once, poison twice each
    admin = kafka.admin(platform, "central")
    admin.delete_topics([dead_topic])[dead_topic].result()


def test_a_group_id_taken_by_a_consumer_group_is_refused_with_a_clear_status(setup, nodes) -> None:
    import grpc
    from confluent_kafka import TopicPartition

    from conveyor_sdk.subscriber import SubscriberError

    platform, topic = setup()
    node = start_node(platform)
    nodes.append(node)
    group = f"mailer.{uuid.uuid4().hex[:6]}"
    kafka.commit_as(platform, "central", group, [TopicPartition(topic, 0, 0)])  # now a consumer group
    with pytest.raises(SubscriberError) as refused:
        locate([node.advertise], topic, group, MAILER_TOKEN)
    assert refused.value.code is grpc.StatusCode.FAILED_PRECONDITION
    assert "consumer group already" in str(refused.value)
