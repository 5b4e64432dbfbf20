"""``clusters:``: the Kafka clusters of the platform."""

from __future__ import annotations

from enum import Enum
from typing import Annotated

from pydantic import Field, model_validator

from conveyor.config.units import Model, Name, Secret


class ClusterRole(str, Enum):
    writable = "writable"
    read = "read"


class Security(str, Enum):
    """How a local cluster's clients connect: in clear without identity, or SCRAM over TLS with ACLs."""

    plaintext = "plaintext"
    sasl_ssl = "sasl_ssl"


class Part(str, Enum):
    """Conveyor's own parts. On a secured cluster each connects as its own principal,
    ``User:conveyor-<part>``, with the ACLs of what it uses (conveyor.acls.parts)."""

    gateway = "gateway"
    replicator = "replicator"
    dispatcher = "dispatcher"
    lake = "lake"
    realtime = "realtime"
    ops = "ops"

    @property
    def user(self) -> str:
        return f"conveyor-{self.value}"


class ReplicationDefaults(Model):
    """Replication of topics on a cluster unless a topic says otherwise."""

    factor: int | None = Field(default=None, ge=1, description="default: min(3, brokers)")
    min_insync: int | None = Field(default=None, ge=1, description="default: min(2, factor)")


class Cluster(Model):
    """A Kafka cluster: started locally by ``conveyor up``, or an existing one at ``bootstrap``."""

    role: ClusterRole
    brokers: int = Field(default=1, ge=1, le=32)
    racks: list[Name] = Field(default_factory=list)
    #: Broker tags for isolation: tag -> broker ids (1-based) that carry it.
    tags: dict[Name, list[Annotated[int, Field(ge=1)]]] = Field(default_factory=dict)
    bootstrap: str | None = Field(default=None, min_length=1)
    #: Extra librdkafka settings for reaching an existing cluster (security.protocol, sasl.*); any
    #: value may be ``${ENV_VAR}`` or ``file:PATH``, and all are masked when printed.
    client: dict[str, Secret] = Field(default_factory=dict)
    #: Per part of Conveyor, settings that replace ``client``'s for its own identity on an existing
    #: cluster (``sasl.username``, ``sasl.password``, ``ssl.certificate.location``...). A part not
    #: named here connects with ``client``'s. Local secured clusters need none: `conveyor up` and
    #: `conveyor acl apply` make each part's credentials.
    credentials: dict[Part, dict[str, Secret]] = Field(default_factory=dict)
    replication: ReplicationDefaults = Field(default_factory=ReplicationDefaults)
    #: Writable clusters the gateway writes to, in order, while this one cannot take writes.
    failover: list[Name] = Field(default_factory=list)
    #: Listeners of a local cluster: sasl_ssl runs SCRAM-SHA-512 over TLS with Kafka's authorizer
    #: on (nothing allowed without an ACL). An existing cluster's security goes under ``client``.
    security: Security = Security.plaintext

    @model_validator(mode="after")
    def _racks_cover_brokers(self) -> Cluster:
        if self.bootstrap is not None and self.security != Security.plaintext:
            raise ValueError("security applies to clusters `conveyor up` starts; for an existing cluster at "
                             "bootstrap, give its settings under client (security.protocol, sasl.*, ssl.*)")
        if self.racks and len(self.racks) != self.brokers:
            raise ValueError(
                f"racks names {len(self.racks)} racks for {self.brokers} brokers: "
                "give one rack per broker, or none"
            )
        for tag, ids in self.tags.items():
            outside = sorted(i for i in ids if i > self.brokers)
            if outside:
                raise ValueError(f"tag {tag!r} names broker ids {outside} beyond the {self.brokers} brokers")
        return self

    @property
    def is_local(self) -> bool:
        return self.bootstrap is None

    @property
    def default_replication_factor(self) -> int:
        return self.replication.factor or min(3, self.brokers)

    @property
    def default_min_insync(self) -> int:
        return self.replication.min_insync or min(2, self.default_replication_factor)

    def broker_ids(self) -> list[int]:
        return list(range(1, self.brokers + 1))

    def rack_of(self, broker_id: int) -> str | None:
        return self.racks[broker_id - 1] if self.racks else None

    def tags_of(self, broker_id: int) -> list[str]:
        return sorted(tag for tag, ids in self.tags.items() if broker_id in ids)

