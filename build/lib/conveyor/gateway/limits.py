"""The topics' max.message.bytes as the gateway's clusters have them, for the limits it derives
(conveyor.limits) so that every event of a request is known to fit before the first one is queued:
a refusal after part of a request was queued would write a prefix of it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from confluent_kafka import KafkaException
from confluent_kafka.admin import ConfigResource

from conveyor import kafka
from conveyor.config import Platform
from conveyor.limits import BROKER_DEFAULT_MAX

log = logging.getLogger(__name__)


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
