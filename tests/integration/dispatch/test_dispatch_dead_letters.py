"""Dead letters against real brokers: the largest event the gateway accepts reaches the dead-letter
topic with its headers, and a dead letter that cannot be written (larger than the producer takes,
or than the dead-letter topic takes) neither kills the reader nor stops its partition."""

from __future__ import annotations

import logging
import os
import queue
import time
import uuid

import grpc
import pytest
from confluent_kafka.admin import NewTopic

from conveyor import kafka
from conveyor_sdk.subscriber import Message
from conveyor_sdk.protos import dispatch_pb2 as pb
from conveyor.limits import BROKER_DEFAULT_MAX, PRODUCER_MESSAGE_MAX, event_limit
from conveyor.replicate.plan import ORIGIN_HEADER
from tests.conftest import eventually, read_topic
from tests.dispatchkit import (
    MAILER_TOKEN,
    Ledger,
    committed_offsets,
    end_offsets,
    nodes,  # noqa: F401 (a fixture)
    setup,  # noqa: F401 (a fixture)
    start_node,
)
from tests.integration.dispatch.test_dispatch import subscriber
from tests.integration.dispatch.test_dispatch_limits import Stream, sample, subscribe

pytestmark = pytest.mark.integration

#: The gateway's largest event: key and value together (the gateway's own limit is 1 MiB).
LARGEST_EVENT = event_limit(2**20, BROKER_DEFAULT_MAX)


def test_the_largest_event_the_gateway_accepts_is_dead_lettered_whole_with_its_headers(setup, nodes) -> None:
    platform, topic = setup(max_attempts=1)
    node = start_node(platform)
    nodes.append(node)
    group = f"mailer.{uuid.uuid4().hex[:6]}"
    key = uuid.uuid4().hex.encode()
    value = os.urandom(LARGEST_EVENT - len(key))  # incompressible: the brokers see every byte
    origin = (ORIGIN_HEADER, f"dc1/{topic}/0/123456".encode())  # what the replicator adds on the way
    producer = kafka.producer(platform, "central", "dispatch-test", {"message.max.bytes": PRODUCER_MESSAGE_MAX})
    producer.produce(topic, value, key, partition=0, headers=[origin])
    assert producer.flush(60) == 0
    stream = Stream(grpc.insecure_channel(node.advertise), MAILER_TOKEN, subscribe(topic, group, credit=1))
    held = stream.take(1, timeout=60)[0]
    assert held.value == value
    stream.send(nacks=[pb.Nack(ids=pb.Ids(partitions=[0], offsets=[held.offset]))])
    dead_topic = f"{topic}.{group}.dead"
    eventually(lambda: sample(node, "conveyor_dispatch_dead_lettered_total", topic=topic, group=group) == 1, 60,
               "the event dead-lettered")
    dead = read_topic(platform, "central", dead_topic)
    assert len(dead) == 1
    assert (dead[0].key(), dead[0].value()) == (key, value), "key and value unchanged"
    headers = dict(dead[0].headers())
    assert headers[ORIGIN_HEADER] == origin[1], "the event's own headers kept"
    assert headers["conveyor-dead-letter-reason"] == b"nacked"
    assert headers["conveyor-dead-letter-attempts"] == b"1"
    assert headers["conveyor-dead-letter-topic"] == topic.encode()
    assert headers["conveyor-dead-letter-partition"] == b"0"
    assert headers["conveyor-dead-letter-offset"] == str(held.offset).encode()
    assert headers["conveyor-dead-letter-group"] == group.encode()
    stream.close()
    admin = kafka.admin(platform, "central")  # kept referenced until the deletion is done
    admin.delete_topics([dead_topic])[dead_topic].result()


def test_dead_letters_that_cannot_be_written_are_skipped_and_the_partition_keeps_flowing(
        setup, nodes, caplog) -> None:
    platform, topic = setup(max_attempts=1)
    node = start_node(platform)
    nodes.append(node)
    group = f"mailer.{uuid.uuid4().hex[:6]}"
    dead_topic = f"{topic}.{group}.dead"
    # A dead-letter topic that takes small records only: the broker refuses the middle-sized one.
    admin = kafka.admin(platform, "central")
    spec = platform.cluster("central")
    admin.create_topics([NewTopic(dead_topic, 1, spec.default_replication_factor,
                                  config={"min.insync.replicas": str(spec.default_min_insync),
                                          "max.message.bytes": "2048"})])[dead_topic].result(30)
    # Random bytes: the broker measures the compressed batch.
    small, refused_by_topic = b"poison-small", b"poison-4k" + os.urandom(4000)
    # Written by a producer that allows more than the dispatcher's does (not through the gateway).
    too_large = b"poison-1m".ljust(PRODUCER_MESSAGE_MAX, b".")
    poison = [small, refused_by_topic, too_large]
    producer = kafka.producer(platform, "central", "dispatch-test", {"message.max.bytes": 1_040_000})
    fine = [f"fine-{i}".encode() for i in range(60)]
    for value in [*fine[:20], small, *fine[20:40], refused_by_topic, too_large, *fine[40:]]:
        producer.produce(topic, value, partition=0)
    assert producer.flush(60) == 0
    ends = end_offsets(platform, topic)
    unwritable = {20 + 1 + 20, 20 + 1 + 20 + 1}  # the offsets of the two that cannot be written

    def handle(message: Message) -> None:
        if message.value.startswith(b"poison"):
            raise RuntimeError("cannot handle this one")

    ledger = Ledger()
    caplog.set_level(logging.WARNING, logger="conveyor.dispatch")
    with subscriber(node, topic, group, ledger, 1, handle, concurrency=4):
        eventually(lambda: committed_offsets(platform, topic, group)[0][0] == ends[0], 60,
                   "partition 0 committed past the records that cannot be dead-lettered")
    ok, health = node.health()
    assert ok and "error" not in health["readers"][f"{topic}/{group}"], health
    assert ledger.confirmed_values() == set(fine)
    assert [m.value() for m in read_topic(platform, "central", dead_topic)] == [small]
    assert sample(node, "conveyor_dispatch_dead_lettered_total", topic=topic, group=group) == 1
    assert sample(node, "conveyor_dispatch_dead_letters_unwritable_total", topic=topic, group=group,
                  partition="0") == 2
    assert sample(node, "conveyor_dispatch_last_unwritable_dead_letter_offset", topic=topic, group=group,
                  partition="0") in unwritable, "the offset of the one given up on last"
    logged = [r.getMessage() for r in caplog.records if "cannot be dead-lettered" in r.getMessage()]
    assert len(logged) == 2, logged
    for offset in unwritable:
        [line] = [line for line in logged if f"{topic}/0@{offset}" in line]
        assert "committed past it" in line, line
    admin.delete_topics([dead_topic])[dead_topic].result()


def test_five_of_the_largest_events_reach_a_client_that_asked_for_them_all_at_once(setup, nodes) -> None:
    # One frame of five ~1 MB records is above the 4 MiB a gRPC client takes by default: the client
    # refused it (RESOURCE_EXHAUSTED) and received nothing, however often it asked again.
    platform, topic = setup()
    node = start_node(platform)
    nodes.append(node)
    producer = kafka.producer(platform, "central", "dispatch-test", {"message.max.bytes": PRODUCER_MESSAGE_MAX})
    values = [os.urandom(LARGEST_EVENT - 16) for _ in range(5)]
    for value in values:
        producer.produce(topic, value, uuid.uuid4().bytes, partition=0)
    assert producer.flush(60) == 0
    stream = Stream(grpc.insecure_channel(node.advertise), MAILER_TOKEN,
                    subscribe(topic, f"mailer.{uuid.uuid4().hex[:6]}", credit=0))
    time.sleep(10)  # no credit yet: the node's reader fetches all five meanwhile, to send them at once
    stream.send(credit=10)
    try:
        held = stream.take(5, timeout=60)
    except queue.Empty:
        raise AssertionError(f"not all five came; the stream ended {stream.status}: {stream.details}") from None
    assert sorted(m.value for m in held) == sorted(values)
    stream.close()
