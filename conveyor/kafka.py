"""Kafka clients with the platform's safe defaults, built from platform.yaml.

Every part of Conveyor gets its producers, consumers and admin clients here, so the safe defaults
are set once: acks=all with idempotence (a leader re-election loses nothing that was acknowledged),
no auto-commit (auto-commit gives no guarantee at all), and offsets stored only when the caller says
the message is processed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar

from confluent_kafka import (Consumer, ConsumerGroupTopicPartitions, KafkaError, KafkaException, Producer, ShareConsumer,
                             TopicPartition)
from confluent_kafka.admin import AdminClient, ConsumerGroupDescription

from conveyor.config import Platform, Purpose
from conveyor.errors import ConveyorError
from conveyor.kafka_logs import LIBRDKAFKA

#: Kafka's internal topic of consumer group commits.
OFFSETS_TOPIC = "__consumer_offsets"
T = TypeVar("T")

PRODUCER_DEFAULTS: dict[str, Any] = {
    "acks": "all",
    "enable.idempotence": True,
    "linger.ms": 5,
    "compression.type": "lz4",
    # The Java client's partitioner: a key lands in the same partition whichever client wrote it,
    # so per-key order holds across the gateway, the replicator and any Java producer.
    "partitioner": "murmur2_random",
    # Give a failed-over partition time to find its new leader before a delivery is failed.
    "message.timeout.ms": 60_000,
}

CONSUMER_DEFAULTS: dict[str, Any] = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    # A group with no committed offset starts at the beginning: a re-read is visible and
    # de-duplicable, a skip is silent loss.
    "auto.offset.reset": "earliest",
    # Never hand out records of aborted or open transactions (the replicator writes transactionally).
    "isolation.level": "read_committed",
    "partition.assignment.strategy": "cooperative-sticky",
}


class KafkaOperationError(ConveyorError):
    """A Kafka call failed; ``error`` is librdkafka's error with its flags (retriable, fatal)."""

    def __init__(self, what: str, error: KafkaError) -> None:
        self.error = error
        super().__init__(f"{what}: {error.name()} ({error.str()})")

    @classmethod
    def from_exception(cls, what: str, exc: KafkaException) -> KafkaOperationError:
        return cls(what, exc.args[0])


def client_config(
    platform: Platform, cluster_name: str, overrides: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Connection settings of a cluster plus ``overrides``; the base of every client here. A
    platform acting as one of Conveyor's parts (``Platform.acting_as``) connects as that part."""
    cluster = platform.cluster(cluster_name)
    part = platform.part
    config: dict[str, Any] = {"bootstrap.servers": platform.bootstrap(cluster_name)}
    config.update({key: secret.get_secret_value() for key, secret in cluster.client.items()})
    if part is not None:
        config.update({key: secret.get_secret_value() for key, secret in cluster.credentials.get(part, {}).items()})
    config.update(overrides or {})
    return config


#: A logs cluster's producers (clusters.<name>.purpose): the leader's acknowledgement is enough, and
#: without acks=all there is no idempotence. A transactional producer keeps acks=all (config check
#: refuses exactly-once routes into a logs cluster).
LOGS_PRODUCER: dict[str, Any] = {"acks": "1", "enable.idempotence": False}


def producer_config(
    platform: Platform, cluster_name: str, client_id: str, overrides: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    purpose = {}
    if platform.cluster(cluster_name).purpose is Purpose.logs and "transactional.id" not in (overrides or {}):
        purpose = LOGS_PRODUCER
    return client_config(platform, cluster_name, {**PRODUCER_DEFAULTS, **purpose, "client.id": client_id,
                                                  "logger": LIBRDKAFKA, **(overrides or {})})


def consumer_config(
    platform: Platform,
    cluster_name: str,
    group: str,
    client_id: str,
    overrides: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    return client_config(
        platform,
        cluster_name,
        {**CONSUMER_DEFAULTS, "group.id": group, "client.id": client_id, "logger": LIBRDKAFKA, **(overrides or {})},
    )


def producer(
    platform: Platform, cluster_name: str, client_id: str, overrides: Mapping[str, Any] | None = None
) -> Producer:
    return Producer(producer_config(platform, cluster_name, client_id, overrides))


def consumer(
    platform: Platform,
    cluster_name: str,
    group: str,
    client_id: str,
    overrides: Mapping[str, Any] | None = None,
) -> Consumer:
    return Consumer(consumer_config(platform, cluster_name, group, client_id, overrides))


def share_consumer(
    platform: Platform,
    cluster_name: str,
    group: str,
    client_id: str,
    overrides: Mapping[str, Any] | None = None,
) -> ShareConsumer:
    """A KIP-932 share consumer that acknowledges each record explicitly: a record is done only
    when the caller says so (librdkafka's default, implicit mode, accepts a batch on the next poll)."""
    return ShareConsumer(client_config(platform, cluster_name, {
        "group.id": group, "client.id": client_id, "share.acknowledgement.mode": "explicit", "logger": LIBRDKAFKA,
        **(overrides or {})}))


#: Errors that pass on their own: a request caught by a broker restarting (its handle torn down,
#: its connection dropped) or a broker not answering yet. librdkafka flags none of them retriable.
_PASSING = frozenset({KafkaError._DESTROY_BROKER, KafkaError._TRANSPORT, KafkaError._TIMED_OUT,
                      KafkaError._ALL_BROKERS_DOWN})
#: A group's coordinator moving or loading: an offset commit's bare error code, never flagged
#: retriable, that passes once the coordinator is found again.
COORDINATOR_MOVING = frozenset({KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
                                KafkaError.COORDINATOR_LOAD_IN_PROGRESS})


def settled(ask: Callable[[], T], timeout: float = 60.0, interval: float = 0.5,
            passing: frozenset[int] = frozenset()) -> T:
    """``ask()``, asked again while it raises a KafkaException that is retriable or passes on its
    own (``_PASSING``, and the request's own ``passing`` codes), for up to ``timeout`` seconds; any
    other error, or one that outlasts the timeout, is raised."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return ask()
        except KafkaException as failed:
            error = failed.args[0] if failed.args and isinstance(failed.args[0], KafkaError) else None
            again = error is not None and (error.retriable() or error.code() in _PASSING or error.code() in passing)
            if not again or time.monotonic() > deadline:
                raise
            time.sleep(interval)


#: Seconds a caller asks a group's coordinator again, by default, while it moves or loads.
COORDINATOR_PATIENCE = 30.0
#: librdkafka's own timeout for a request to a group's coordinator. Its lookup of the coordinator has
#: none: when the request timed out during the lookup and the coordinator is found after, librdkafka
#: sends it anyway and aborts the whole process (librdkafka issue 4605, open in 2.16). An hour outlasts
#: any coordinator's failover; callers bound their own wait with :func:`answer`.
COORDINATOR_REQUEST_TIMEOUT = 3600.0


def answer(future: Future[T], timeout: float) -> T:
    """``future``'s result, waited for up to ``timeout`` seconds; past that a KafkaException
    (_TIMED_OUT), the request left to librdkafka, which completes or fails it later."""
    try:
        return future.result(timeout=max(timeout, 0.0))
    except FutureTimeout:
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"no answer within {timeout:g} s")) from None


def describe_groups(admin: AdminClient, groups: Sequence[str],
                    patience: float = COORDINATOR_PATIENCE) -> dict[str, ConsumerGroupDescription]:
    """The groups' descriptions, asked again for up to ``patience`` seconds while a coordinator
    moves (NOT_COORDINATOR while a broker restarts or is loaded) or loads its partition after a
    broker's start; any other error is raised."""
    def ask() -> dict[str, ConsumerGroupDescription]:
        futures = admin.describe_consumer_groups(sorted(groups), request_timeout=COORDINATOR_REQUEST_TIMEOUT)
        deadline = time.monotonic() + 10
        return {group: answer(future, deadline - time.monotonic()) for group, future in futures.items()}

    return settled(ask, patience, passing=COORDINATOR_MOVING)


def commit_as(platform: Platform, cluster_name: str, group: str, offsets: Sequence[TopicPartition],
              timeout: float = 60.0) -> None:
    """Commit ``offsets`` for ``group`` as a consumer that is no member of it does (a bench's or a
    test's group), through the admin API: each try is given up after 15 s, where a consumer's
    synchronous commit can wait for ever on a coordinator that moved. Tried again while the
    coordinator moves or a broker restarts."""
    client = admin(platform, cluster_name)

    def once() -> None:
        request = ConsumerGroupTopicPartitions(group, list(offsets))
        altered = answer(client.alter_consumer_group_offsets(
            [request], request_timeout=COORDINATOR_REQUEST_TIMEOUT)[group], 15)
        failed = [tp.error for tp in altered.topic_partitions or () if tp.error is not None]
        if failed:
            raise KafkaException(failed[0])

    settled(once, timeout, passing=COORDINATOR_MOVING)


def admin(platform: Platform, cluster_name: str, overrides: Mapping[str, Any] | None = None) -> AdminClient:
    """An admin client. Keep it referenced until its futures resolve: librdkafka fails the pending
    requests of a destroyed handle (_DESTROY), which a chained ``admin(...).create_topics(...)`` does."""
    # librdkafka logs an informational line for every admin client torn down with queued events.
    return AdminClient(client_config(platform, cluster_name, {"log_level": 4, "logger": LIBRDKAFKA,
                                                              **(overrides or {})}))


def committed(platform: Platform, cluster_name: str, group: str, partitions: Sequence[TopicPartition] | None = None,
              timeout: float = 10.0) -> list[TopicPartition]:
    """The commits of ``group`` (offset and metadata; offset < 0: none) on ``partitions``, or on every
    partition of the cluster's own topics (not ``__``-internal ones); raises KafkaException.

    Read through a consumer handle of the group that never joins it, never through the admin API's
    ListConsumerGroupOffsets: when the group's coordinator answers NOT_COORDINATOR (it moved, as when
    a broker restarts), librdkafka's admin handle, which has no group of its own, dereferences a null
    group and the whole process dies with SIGSEGV (librdkafka issue 5040, open in 2.16). A consumer's
    handle looks the coordinator up again and retries."""
    reader = consumer(platform, cluster_name, group, "conveyor-committed")
    try:
        if partitions is None:
            topics = reader.list_topics(timeout=timeout).topics
            partitions = [TopicPartition(name, number) for name, meta in sorted(topics.items())
                          if not name.startswith("__") for number in sorted(meta.partitions)]
        return reader.committed(list(partitions), timeout=timeout) if partitions else []
    finally:
        reader.close()
