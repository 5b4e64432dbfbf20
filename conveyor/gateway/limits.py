"""How large one event may be on its way to Kafka: the gateway's own limit, the producer's and the
topic's, so that every event of a request is known to fit before the first one is queued.

librdkafka refuses in ``produce()`` a record whose key and value plus its framing exceed the
producer's ``message.max.bytes``; the broker refuses a record batch above the topic's
``max.message.bytes``. Either refusal after part of a request was queued would write a prefix of it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from confluent_kafka import KafkaException
from confluent_kafka.admin import ConfigResource

from conveyor import kafka
from conveyor.config import Platform

log = logging.getLogger(__name__)

#: The producer's message.max.bytes (librdkafka's default, set explicitly so the limit is ours).
PRODUCER_MESSAGE_MAX = 1_000_000
#: librdkafka accepts key + value + 36 bytes up to message.max.bytes (measured on 2.16: a record's
#: largest framing in the v2 format).
RECORD_OVERHEAD = 36
#: A record batch's header, which the broker counts against the topic's max.message.bytes.
BATCH_OVERHEAD = 61
#: The broker's default max.message.bytes, assumed for a topic whose config cannot be read.
BROKER_DEFAULT_MAX = 1_048_588


def event_limit(gateway_max: int, topic_max: int) -> int:
    """The most bytes one record's key and value may take together."""
    return min(gateway_max, PRODUCER_MESSAGE_MAX - RECORD_OVERHEAD, topic_max - BATCH_OVERHEAD - RECORD_OVERHEAD)


def batch_size(topic_maxima: Iterable[int]) -> int:
    """The producer's batch.size: no batch of several records may exceed any topic's limit, or the
    broker refuses the whole batch after other batches of the same request were written."""
    return min([PRODUCER_MESSAGE_MAX, *(m - BATCH_OVERHEAD for m in topic_maxima)])


def read_topic_maxima(platform: Platform, clusters: Iterable[str], topics: Iterable[str],
                      timeout: float = 5.0) -> dict[str, int]:
    """Each topic's smallest max.message.bytes over ``clusters``: a request may fail over to any."""
    topics = list(topics)
    maxima = dict.fromkeys(topics, BROKER_DEFAULT_MAX)
    for cluster in clusters:
        admin = kafka.admin(platform, cluster)
        futures = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics],
                                         request_timeout=timeout)
        for resource, future in futures.items():
            try:
                value = future.result(timeout).get("max.message.bytes")
            except (KafkaException, TimeoutError) as err:
                log.warning("max.message.bytes of %s on %s not read (%s): assuming %d", resource.name, cluster,
                            err, BROKER_DEFAULT_MAX)
                continue
            if value is not None and value.value is not None:
                maxima[resource.name] = min(maxima[resource.name], int(value.value))
    return maxima
