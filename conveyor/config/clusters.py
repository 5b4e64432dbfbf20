"""``clusters:``: the Kafka clusters of the platform."""

from __future__ import annotations

from enum import Enum
from typing import Annotated

from pydantic import BeforeValidator, Field, model_validator

from conveyor.config.units import Model, Name, Secret, SizeBytes


class ClusterRole(str, Enum):
    writable = "writable"
    read = "read"


#: A logs cluster's producer quota unless it sets one: a quarter of a 1 Gb/s uplink per producer.
LOGS_PRODUCER_QUOTA = 32 * 1024 * 1024


class Purpose(str, Enum):
    """What a cluster's traffic is for; it sets the defaults of its topics and producers."""

    #: Services' events: acks=all, min ISR min(2, replicas), a producer waits for its acks.
    online = "online"
    #: Logs and traces: must never hold a producer up. acks=1, min ISR 1, and the gateway waits at
    #: most gateway.logs_wait, then sheds (and reports) what was not acknowledged.
    logs = "logs"
    #: Batch readers and the lake: the read cluster the pipelines take when several are declared.
    offline = "offline"


class Security(str, Enum):
    """How the clients of a cluster `conveyor up` starts connect: in clear without identity, or
    SCRAM over TLS with ACLs."""

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
    min_insync: int | None = Field(default=None, ge=1, description="default: min(2, factor); 1 on a logs cluster")


class MetricsPage(Model):
    """One node's JMX exporter page (Prometheus text)."""

    url: str = Field(pattern=r"^https?://")
    #: The node's name in reports; default: the URL's host:port.
    node: Name | None = None
    #: The broker's node.id, which ties the page to its broker (the throttle and the balancer weigh
    #: brokers by it); left out, ops infers from the page whether the node is a broker.
    broker: int | None = Field(default=None, ge=0)
    #: A dedicated KRaft controller: no broker figures on its page.
    controller: bool = False

    @model_validator(mode="after")
    def _one_role(self) -> MetricsPage:
        if self.controller and self.broker is not None:
            raise ValueError("a page is a broker's (broker: id) or a dedicated controller's (controller: true)")
        return self


def _page(value: object) -> object:
    """A page given by its URL alone."""
    return {"url": value} if isinstance(value, str) else value


class Cluster(Model):
    """A Kafka cluster: an existing one at ``bootstrap``, or, without it, one ``conveyor up`` starts
    on this machine (it then writes the bootstrap and the rest into the resolved view)."""

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
    #: named here connects with ``client``'s.
    credentials: dict[Part, dict[str, Secret]] = Field(default_factory=dict)
    #: SCRAM-SHA-512 users Conveyor keeps on the cluster, name -> password: `acl apply` creates those
    #: the cluster lacks. Left out, the cluster's owner manages its users and Conveyor only its ACLs.
    users: dict[str, Secret] = Field(default_factory=dict)
    #: The JMX exporter page of each node (a URL, or a page with its node's name and broker id): the
    #: ops watcher, the balancer and the throttle read the brokers' figures there.
    metrics: list[Annotated[MetricsPage, BeforeValidator(_page)]] = Field(default_factory=list)
    #: Broker id -> a folder on the broker's data disk, seen from this machine: the throttle weighs
    #: the disk's busy time (/proc/diskstats) as a signal. Brokers on other machines give none.
    disks: dict[Annotated[int, Field(ge=0)], str] = Field(default_factory=dict)
    replication: ReplicationDefaults = Field(default_factory=ReplicationDefaults)
    #: Writable clusters the gateway writes to, in order, while this one cannot take writes.
    failover: list[Name] = Field(default_factory=list)
    #: Listeners of a cluster `conveyor up` starts: sasl_ssl runs SCRAM-SHA-512 over TLS with Kafka's
    #: authorizer on (nothing allowed without an ACL). An existing cluster's security goes under ``client``.
    security: Security = Security.plaintext
    purpose: Purpose = Purpose.online
    #: Most partitions (leaders, not replicas) the cluster may hold: `topics plan` refuses a plan,
    #: and the bus a topic request, that would take it past this.
    partition_budget: int = Field(default=200_000, ge=1)
    #: Bytes per second each producer (client id) may write to each broker, a client-id default
    #: quota `topics apply` keeps: Kafka delays a producer past it instead of letting it take the
    #: brokers from every other. Left out: 32 MiB/s on a logs cluster, not managed elsewhere; -1
    #: removes it.
    producer_quota: SizeBytes | None = Field(default=None, ge=-1)

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
    def default_replication_factor(self) -> int:
        return self.replication.factor or min(3, self.brokers)

    @property
    def default_min_insync(self) -> int:
        if self.replication.min_insync:
            return self.replication.min_insync
        return 1 if self.purpose is Purpose.logs else min(2, self.default_replication_factor)

    @property
    def managed_producer_quota(self) -> int | None:
        """The producer quota `topics apply` keeps (-1: none); None when the cluster's quotas are
        not Conveyor's to manage."""
        if self.producer_quota is not None:
            return self.producer_quota
        return LOGS_PRODUCER_QUOTA if self.purpose is Purpose.logs else None

    def broker_ids(self) -> list[int]:
        return list(range(1, self.brokers + 1))

    def rack_of(self, broker_id: int) -> str | None:
        return self.racks[broker_id - 1] if self.racks else None

    def tags_of(self, broker_id: int) -> list[str]:
        return sorted(tag for tag, ids in self.tags.items() if broker_id in ids)

