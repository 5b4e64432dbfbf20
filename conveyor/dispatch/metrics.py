"""The dispatcher's Prometheus metrics (names in docs/dispatch.md), on a registry per node so that
several nodes in one process (tests) never share counters. Every series is per (topic, group),
but for the node's own: readers running and refused, and Read streams closed before they subscribed."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_PAIR = ["topic", "group"]


class IgnoredAcks:
    """``conveyor_dispatch_ignored_acks`` with topic and group filled in; the reason varies."""

    def __init__(self, counter: Counter, topic: str, group: str) -> None:
        self._counter, self._topic, self._group = counter, topic, group

    def labels(self, reason: str) -> Counter:
        return self._counter.labels(topic=self._topic, group=self._group, reason=reason)


class Unwritable:
    """Dead letters neither the producer nor the dead-letter topic takes, by partition: how many,
    and the offset of the latest, so that an alert leads to the record."""

    def __init__(self, counter: Counter, last: Gauge, topic: str, group: str) -> None:
        self._counter, self._last, self._pair = counter, last, {"topic": topic, "group": group}

    def record(self, partition: int, offset: int) -> None:
        self._counter.labels(**self._pair, partition=str(partition)).inc()
        self._last.labels(**self._pair, partition=str(partition)).set(offset)


@dataclass(frozen=True)
class ReaderMetrics:
    """The series of one (topic, group), bound to its labels."""

    backlog: Gauge
    in_flight: Gauge
    clients: Gauge
    paused: Gauge
    metadata_bytes: Gauge
    delivered: Counter
    redelivered: Counter
    acked: Counter
    nacked: Counter
    timed_out: Counter
    dead_lettered: Counter
    commits: Counter
    commit_failures: Counter
    stale_metadata: Counter
    released: Counter
    delivery_latency: Histogram
    #: Acks and nacks that changed nothing: ``ignored.labels(reason=...)``.
    ignored: IgnoredAcks
    unwritable: Unwritable


class NodeMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = {"registry": self.registry}
        self._gauges = {
            "backlog": Gauge("conveyor_dispatch_backlog", "Partition end - committed - individually acked, "
                             "over the partitions this node serves", _PAIR, **r),
            "in_flight": Gauge("conveyor_dispatch_in_flight", "Messages with a client and not acked", _PAIR, **r),
            "clients": Gauge("conveyor_dispatch_clients_connected", "Open Read streams", _PAIR, **r),
            "paused": Gauge("conveyor_dispatch_paused_partitions", "Partitions whose fetch is paused "
                            "(prefetch full, or the ack metadata near offset.metadata.max.bytes)", _PAIR, **r),
            "metadata_bytes": Gauge("conveyor_dispatch_commit_metadata_bytes", "Largest ack metadata committed "
                                    "on a partition served here", _PAIR, **r),
        }
        self._counters = {
            "delivered": Counter("conveyor_dispatch_delivered", "Messages sent to clients, redeliveries "
                                 "included", _PAIR, **r),
            "redelivered": Counter("conveyor_dispatch_redelivered", "Deliveries after the first of a message",
                                   _PAIR, **r),
            "acked": Counter("conveyor_dispatch_acked", "Acks applied", _PAIR, **r),
            "nacked": Counter("conveyor_dispatch_nacked", "Nacks applied", _PAIR, **r),
            "timed_out": Counter("conveyor_dispatch_ack_deadline_passed", "Deliveries taken back unacked after "
                                 "the ack deadline", _PAIR, **r),
            "dead_lettered": Counter("conveyor_dispatch_dead_lettered", "Messages written to the dead-letter "
                                     "topic after max_attempts", _PAIR, **r),
            "commits": Counter("conveyor_dispatch_commits", "Offset commits with ack metadata", _PAIR, **r),
            "commit_failures": Counter("conveyor_dispatch_commit_failures", "Offset commits Kafka refused",
                                       _PAIR, **r),
            "stale_metadata": Counter("conveyor_dispatch_unusable_ack_metadata", "Partitions taken over whose "
                                      "commit metadata could not be decoded (acks above it redelivered)",
                                      _PAIR, **r),
            "released": Counter("conveyor_dispatch_share_released", "Records the share backend gave back to the "
                                "share group (RELEASE: nacked, past the deadline, client gone, lock ending)",
                                _PAIR, **r),
        }
        self._latency = Histogram("conveyor_dispatch_delivery_latency_seconds", "From a message's Kafka "
                                  "timestamp to its delivery to a client; one observation per frame, "
                                  "for its oldest message", _PAIR,
                                  buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60),
                                  **r)
        self._ignored = Counter("conveyor_dispatch_ignored_acks", "Acks and nacks that changed nothing, "
                                "by reason (unknown, foreign, late or repeated ids)", [*_PAIR, "reason"], **r)
        self._unwritable = Counter("conveyor_dispatch_dead_letters_unwritable", "Messages out of attempts "
                                   "that neither the producer nor the dead-letter topic takes (too large): "
                                   "logged and committed past", [*_PAIR, "partition"], **r)
        # Not among the pair's gauges that go with its reader: it leads to a record no sink has.
        self._last_unwritable = Gauge("conveyor_dispatch_last_unwritable_dead_letter_offset", "Offset of the "
                                      "latest message that could not be dead-lettered", [*_PAIR, "partition"], **r)
        self.readers = Gauge("conveyor_dispatch_readers", "(topic, group) readers running on this node", **r)
        self.refused = Counter("conveyor_dispatch_readers_refused", "New (topic, group)s refused at a cap on "
                               "readers (RESOURCE_EXHAUSTED), by service and the setting that refused them",
                               ["service", "limit"], **r)
        self.streams_refused = Counter("conveyor_dispatch_streams_refused", "Read streams refused at "
                                       "dispatch.max_streams_per_service (RESOURCE_EXHAUSTED)", ["service"], **r)
        self.reaped = Counter("conveyor_dispatch_readers_reaped", "Readers stopped after dispatch."
                              "reader_idle_timeout without a client", _PAIR, **r)
        self.subscribe_timeouts = Counter("conveyor_dispatch_subscribe_timeouts", "Read streams closed for "
                                          "not subscribing within dispatch.subscribe_timeout", **r)

    def reader(self, topic: str, group: str) -> ReaderMetrics:
        bound = {name: metric.labels(topic=topic, group=group)
                 for name, metric in {**self._gauges, **self._counters}.items()}
        return ReaderMetrics(**bound, delivery_latency=self._latency.labels(topic=topic, group=group),
                             ignored=IgnoredAcks(self._ignored, topic, group),
                             unwritable=Unwritable(self._unwritable, self._last_unwritable, topic, group))

    def forget(self, topic: str, group: str) -> None:
        """Drop the pair's gauges once its reader is gone, so that they do not report its last
        values for ever; counters stay. Call before another reader of the pair binds its series."""
        for gauge in self._gauges.values():
            try:
                gauge.remove(topic, group)
            except KeyError:
                pass  # never set
