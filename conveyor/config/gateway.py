"""``gateway:``: the HTTP ingestion gateway."""

from __future__ import annotations

from pydantic import Field

from conveyor.config.edge import Connections
from conveyor.config.tls import Tls
from conveyor.config.units import Model, Seconds, SizeBytes


class Gateway(Model):
    """Settings of every gateway instance (``conveyor gateway serve``)."""

    port: int = Field(default=18080, ge=1024, le=65535, description="first instance's port; --port overrides")
    #: Seconds the local cluster has to acknowledge before events go to a failover cluster.
    failover_after: Seconds = Field(default=5.0, gt=0)
    #: Longest the gateway waits on a cluster of purpose logs: what it has not acknowledged by then
    #: is shed (answered and counted as shed, never as accepted) instead of holding the producer up.
    logs_wait: Seconds = Field(default=0.5, gt=0)
    max_request_bytes: SizeBytes = 16 * 2**20
    #: One event's key and value together; Kafka's own limits (the producer's message.max.bytes,
    #: the topic's max.message.bytes) lower it further (conveyor.limits).
    max_event_bytes: SizeBytes = 2**20
    max_events_per_request: int = Field(default=50_000, ge=1)
    #: A request's line and headers, and then its body, must each arrive within these seconds
    #: (408): a slow sender holds its connection for a bounded time, and no place of any topic.
    header_timeout: Seconds = Field(default=10.0, gt=0)
    body_timeout: Seconds = Field(default=30.0, gt=0)
    #: Headers of one request, by count and by bytes (request line included); more get 431.
    max_headers: int = Field(default=100, ge=8)
    max_header_bytes: SizeBytes = Field(default=32 * 2**10, ge=2**10)
    #: Requests checked or written at once, over all topics; more are refused with 503 and
    #: Retry-After once their bodies are read (a body still arriving holds no place).
    max_concurrent_requests: int = Field(default=512, ge=1)
    #: Bulkheads: topics hash into lanes, each with its own worker budget and bounded queue.
    lanes: int = Field(default=16, ge=1)
    workers_per_lane: int = Field(default=32, ge=1)
    queue_per_lane: int = Field(default=64, ge=0)
    #: Requests with more events get a per-partition summary instead of one entry per event.
    summary_above: int = Field(default=100, ge=0)
    #: Serve HTTPS (``tls: {}`` for the platform's certificate, see Tls).
    tls: Tls | None = None
    #: Connections held at once, overall and per client address, and the deadlines of a new one's
    #: TLS handshake and first request (conveyor.edge_guard).
    connections: Connections = Field(default_factory=Connections)
