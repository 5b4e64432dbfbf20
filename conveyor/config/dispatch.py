"""``dispatch:``: the consumer dispatcher."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from conveyor.config.edge import GrpcConnections
from conveyor.config.tls import Tls
from conveyor.config.units import Model, Name, Seconds


class Dispatch(Model):
    """Settings of every consumer dispatcher node (``conveyor dispatch serve``)."""

    #: Cluster the dispatcher reads; default: pipeline.source, else the only read cluster.
    cluster: Name | None = None
    port: int = Field(default=18090, ge=1024, le=65535, description="gRPC port; --port overrides")
    metrics_port: int = Field(default=18190, ge=1024, le=65535, description="/metrics and /healthz")
    #: Serve gRPC over TLS (``tls: {}`` for the platform's certificate, see Tls).
    tls: Tls | None = None
    #: The gRPC port's connection bounds, each a setting of gRPC's C core.
    connections: GrpcConnections = Field(default_factory=GrpcConnections)
    #: A delivered message not acked within this is delivered again.
    ack_deadline: Seconds = Field(default=30.0, gt=0)
    #: Deliveries of one message before it goes to the dead-letter topic instead.
    max_attempts: int = Field(default=5, ge=1)
    #: Dead-letter topic per (topic, group); created on first use with the cluster's replication.
    dead_letter_topic: str = Field(default="{topic}.{group}.dead", pattern=r"\{topic\}.*\{group\}|\{group\}.*\{topic\}")
    #: Seconds between offset commits (committed offset plus the acks above it in the metadata).
    commit_interval: Seconds = Field(default=0.5, gt=0)
    #: The broker's offset.metadata.max.bytes; the dispatcher fetches no further ahead than fits.
    metadata_max_bytes: int = Field(default=4096, ge=64)
    #: Fetched messages a partition may hold before the first delivery; the fetch pauses beyond
    #: and resumes below half. librdkafka fetches about a megabyte per partition at a time and
    #: drops it on a pause, so a bound near one fetch pauses all the time: 2,000 held the instant
    #: handler to ~25,000 messages/s, 20,000 let it past 70,000.
    prefetch: int = Field(default=20_000, ge=1)
    #: Most messages in one frame to a client.
    batch: int = Field(default=500, ge=1)
    #: Highest credit (unacked messages) one client stream may hold.
    max_credit: int = Field(default=10_000, ge=1)
    #: ``classic``: a consumer group with acks in the commit metadata; ``share``: a KIP-932 share
    #: group (Kafka 4.2+, docs/dispatch.md). Same gRPC API: clients cannot tell which serves them.
    backend: Literal["classic", "share"] = "classic"
    #: Share consumers per (topic, group) on a node (share backend); each polls again only once
    #: its whole previous poll is settled, so several keep records flowing past a slow one.
    share_consumers: int = Field(default=3, ge=1, le=32)
    #: A Read stream must subscribe within this of opening, or it is closed (DEADLINE_EXCEEDED):
    #: streams waiting for their first frame hold a node's stream slots.
    subscribe_timeout: Seconds = Field(default=5.0, gt=0)
    #: Longest redelivery delay a nack may ask for; a longer one is refused (INVALID_ARGUMENT).
    #: The node holds the message meanwhile, and with it its partition's committed offset.
    max_retry_delay: Seconds = Field(default=300.0, gt=0)
    #: A (topic, group) with no client for this long has its reader stopped: acks committed, Kafka
    #: consumers closed and the group left, so its partitions go to nodes whose clients read them.
    #: Clients locate every 5 s, so a minute spares a reconnecting client a rebalance, while a reader
    #: nobody reads frees its slot under the caps below soon enough for the next group.
    reader_idle_timeout: Seconds = Field(default=60.0, gt=0)
    #: Readers (each a Kafka consumer, its threads and up to ``prefetch`` messages per partition) one
    #: node runs at most; a new (topic, group) past it is refused (RESOURCE_EXHAUSTED) until an idle
    #: reader stops, so that clients naming ever new groups cannot exhaust the node.
    max_readers: int = Field(default=128, ge=1)
    #: The same cap per consumer service (a group's service: ``<service>`` or ``<service>.<name>``),
    #: so that one service's runaway groups leave room for the others.
    max_readers_per_service: int = Field(default=32, ge=1)
    #: Read streams one consumer service may hold open on a node (of the node's 512), so that one
    #: service's clients leave streams for the others.
    max_streams_per_service: int = Field(default=128, ge=1)
    #: Share backend: seconds between two readings of the share group's start offsets, published
    #: to the position feed (``conveyor.dispatch.<group>``). Each reading is one short JVM (Kafka's
    #: ShareGroupCommand), hence not more often.
    position_interval: Seconds = Field(default=15.0, ge=1)

    @model_validator(mode="after")
    def _share_attempts_fit_the_broker(self) -> Dispatch:
        # The node dead-letters at max_attempts; the broker must allow one delivery more, and
        # Kafka caps share.delivery.count.limit at 10 (group.share.max.delivery.count.limit).
        if self.backend == "share" and self.max_attempts > 9:
            raise ValueError(f"max_attempts {self.max_attempts} is above 9, the most the share backend "
                             "supports (Kafka caps a share group's delivery count at 10)")
        return self

