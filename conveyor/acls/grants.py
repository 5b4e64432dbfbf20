"""The ACLs platform.yaml asks for on one cluster. Pure: no Kafka here.

Each service is the principal ``User:<service>``. A topic's direct producers may write it (its
producers send through the bus and write nothing on Kafka themselves), its consumers
read it and use consumer groups under a prefix of their own (``<service>.``), so two services never
share a group by accident and none can move another's offsets. Only ALLOW bindings on any host are
managed; a cluster runs with ``allow.everyone.if.no.acl.found=false``, so what is not granted here
is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from conveyor.config import Cluster, Platform


class Resource(str, Enum):
    topic = "TOPIC"
    group = "GROUP"
    transactional_id = "TRANSACTIONAL_ID"
    cluster = "BROKER"


class Pattern(str, Enum):
    literal = "LITERAL"
    prefixed = "PREFIXED"


@dataclass(frozen=True, order=True)
class Grant:
    """One ALLOW binding: ``principal`` may ``operation`` on the resource, from any host."""

    principal: str
    resource: Resource
    name: str
    pattern: Pattern
    operation: str

    def describe(self) -> str:
        prefix = "*" if self.pattern == Pattern.prefixed else ""
        return f"{self.operation} on {self.resource.value.lower()} {self.name}{prefix}"


#: What a producer needs on a topic (idempotence needs no more since Kafka 3.0, KIP-679).
PRODUCE = ("WRITE", "DESCRIBE")
CONSUME = ("READ", "DESCRIBE")


def principal(service: str) -> str:
    return f"User:{service}"


def group_prefix(service: str) -> str:
    """Consumer groups a service may use: its own name, then a dot."""
    return f"{service}."


def is_secured(cluster: Cluster) -> bool:
    """Whether the cluster authenticates clients (and so has an authorizer worth feeding), as its
    client settings say."""
    protocol = cluster.client.get("security.protocol")
    return protocol is not None and protocol.get_secret_value().upper().startswith("SASL")


def wanted_grants(platform: Platform, cluster_name: str) -> set[Grant]:
    grants: set[Grant] = set()
    for topic_name, topic in platform.topics_on(cluster_name).items():
        for service in topic.direct_producers:
            grants |= {Grant(principal(service), Resource.topic, topic_name, Pattern.literal, op) for op in PRODUCE}
        for service in topic.consumers:
            grants |= {Grant(principal(service), Resource.topic, topic_name, Pattern.literal, op) for op in CONSUME}
            grants.add(Grant(principal(service), Resource.group, group_prefix(service), Pattern.prefixed, "READ"))
    return grants


def wanted_users(platform: Platform, cluster_name: str) -> set[str]:
    """The services that need a SCRAM credential on the cluster: every direct producer and consumer of its topics."""
    return {s for topic in platform.topics_on(cluster_name).values()
            for s in (*topic.direct_producers, *topic.consumers)}
