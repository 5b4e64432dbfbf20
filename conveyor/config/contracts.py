"""``contracts:``: the contract registry, where every topic's contract versions are kept, and the
rule new versions are held to unless a topic says otherwise."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from conveyor.config.units import TOPIC_NAME, Model, Name


#: The transactional id of every registration: one writer at a time across every host
#: (conveyor.bus.registry), granted to the parts that register (conveyor.acls.parts).
REGISTRY_TRANSACTIONAL_ID = "conveyor-registry"
#: The groups of the registry's followers start with this (they commit nothing).
REGISTRY_GROUP_PREFIX = "conveyor.registry."


class Compatibility(StrEnum):
    """Confluent Schema Registry's compatibility rules (conveyor.topics.compatibility reads them
    for JSON Schema)."""

    BACKWARD = "BACKWARD"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD = "FORWARD"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL = "FULL"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"
    NONE = "NONE"

    @property
    def transitive(self) -> bool:
        return self.value.endswith("_TRANSITIVE")

    @property
    def backward(self) -> bool:
        return self.value.startswith(("BACKWARD", "FULL"))

    @property
    def forward(self) -> bool:
        return self.value.startswith(("FORWARD", "FULL"))


class Contracts(Model):
    #: The compacted topic that holds every subject's versions and settings.
    topic: str = Field(default="_contracts", pattern=TOPIC_NAME)
    #: The cluster that holds it; default: the read cluster (Platform.read_cluster).
    cluster: Name | None = None
    #: The rule a new version is held to unless its topic, or the registry's settings, say otherwise.
    compatibility: Compatibility = Compatibility.BACKWARD
