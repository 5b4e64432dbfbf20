"""A replicator worker: a member of its route's group, copying the buckets the group gives it.

Workers share nothing but Kafka. Kafka's own group protocol (cooperative-sticky) hands out the
partitions of the route topic, one per bucket, so a worker joining or leaving moves only some
buckets and the others keep copying. A discovery loop polls source metadata; new topics and
partitions are created on the destination through the topic provisioner and fall into buckets
their owners already copy, with no rebalance. The same loop keeps the configs of undeclared copies
in step with their source topics (conveyor.replicate.destination).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from typing import Any

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from conveyor import kafka
from conveyor.bus.registry import Registry
from conveyor.bus.requests import granted_topics
from conveyor.config import CleanupPolicy, Part, Platform, ReplicationMode, Topic
from conveyor.errors import ConveyorError
from conveyor.replicate import plan
from conveyor.replicate.copier import BucketCopier
from conveyor.replicate.route_state import RouteState
from conveyor.replicate.destination import sync_topics
from conveyor.replicate.errors import UnknownRoute
from conveyor.replicate.metrics import ReplicateMetrics
from conveyor.replicate.topic_configs import ConfigDifference
from conveyor.topics.provisioner import ensure_topics

log = logging.getLogger(__name__)


class Worker:
    def __init__(self, platform: Platform, route_name: str, worker_id: str | None = None,
                 metrics: ReplicateMetrics | None = None) -> None:
        platform = platform.acting_as(Part.replicator)
        if route_name not in platform.routes:
            raise UnknownRoute(f"no route {route_name} in the platform file (routes: {', '.join(platform.routes)})")
        self.route = platform.routes[route_name]
        self.worker_id = worker_id or f"{route_name}-{socket.gethostname()}-{os.getpid()}"
        self.metrics = metrics or ReplicateMetrics()
        self.registry = self.metrics.registry
        self.state = RouteState(platform, route_name, self.route, self.worker_id, self.metrics)
        #: The contract registry, followed for the topics granted through the bus when the route
        #: takes them; None otherwise.
        self.contract_registry = (Registry(platform, f"conveyor-replicator-{self.worker_id}")
                         if self.route.requested and platform.contracts.topic in platform.topics else None)
        self._requested: dict[str, Topic] = {}
        #: The buckets the group gave this worker, and their copiers: one per mode the route's topics
        #: are copied in. Changed by the membership callbacks and by discovery (a topic of a mode new
        #: to the route), so under the lock.
        self.owned: set[int] = set()
        self.copiers: dict[tuple[int, ReplicationMode], BucketCopier] = {}
        self._copiers_lock = threading.Lock()
        self._stop = threading.Event()
        self._backoff = 1.0
        #: Set by the assignment callback: the membership consumer's new partitions are paused on its
        #: next loop, as its offsets are read by the copiers, not by it.
        self._pause_pending = False
        #: Per undeclared topic, the source configs its copy does not have (logged when they change).
        self.differences: dict[str, tuple[ConfigDifference, ...]] = {}
        #: Discovery's admin clients of the source and the destination, kept for the worker's life:
        #: a new secured client every discovery (each 2 s by default) cost a TLS handshake and a
        #: SCRAM exchange with a broker each time, most of an idle worker's CPU.
        self._admins: tuple[AdminClient, AdminClient] | None = None

    def stop(self) -> None:
        self._stop.set()

    def health(self) -> tuple[bool, dict[str, Any]]:
        failed = sorted({c.bucket for c in self._running() if c.error is not None})
        return not failed, {"worker": self.worker_id, "route": self.state.name, "buckets": sorted(self.owned),
                            **({"failed_buckets": failed} if failed else {})}

    def _running(self) -> list[BucketCopier]:
        with self._copiers_lock:
            return list(self.copiers.values())

    # -- topics --------------------------------------------------------------------------------

    def _route_topic_spec(self) -> Topic:
        return Topic(partitions=self.route.buckets, cleanup_policy=CleanupPolicy.compact, retention=-1,
                     config={"segment.ms": "600000"})

    def discover(self) -> None:
        """Source topics of the route, created or grown on the destination before they are copied;
        the configs of undeclared ones brought to their source's."""
        if self.contract_registry is not None:  # topics granted through the bus join the route as they come
            with self.contract_registry.reading() as state:
                requested = granted_topics(state.requests)
            if requested != self._requested:
                self.state.platform = self.state.platform.with_requested(requested)
                self._requested = requested
        platform, route = self.state.platform, self.route
        if self._admins is None:
            self._admins = kafka.admin(platform, route.source), kafka.admin(platform, route.destination)
        source_admin, destination_admin = self._admins
        metadata = source_admin.list_topics(timeout=10)
        counts = {name: len(t.partitions) for name, t in metadata.topics.items()
                  if not t.error and platform.copies(self.state.name, name)}
        differences = {}
        if counts:
            synced = sync_topics(platform, route, counts, source_admin, destination_admin)
            for change in synced.changes:
                log.info("%s: destination %s: %s %s", self.state.name, change.topic, change.kind.value, change.detail)
            differences = synced.differences
        self._report(differences)
        destination = destination_admin.list_topics(timeout=10)
        with self.state.lock:
            self.state.source_counts = counts
            self.state.destination_counts = {name: len(destination.topics[name].partitions)
                                             for name in counts if name in destination.topics}
        self.metrics.topics.labels(self.state.name).set(len(counts))
        for topic in counts:
            # At zero from the start: increase() over a series that first appears at its first gap
            # sees no increase, and ReplicationGap would never fire for it.
            self.metrics.gaps.labels(self.state.name, topic)
            self.metrics.gap_records.labels(self.state.name, topic)
        self._start_copiers()

    def _report(self, differences: dict[str, tuple[ConfigDifference, ...]]) -> None:
        for topic, found in differences.items():
            self.metrics.config_differences.labels(self.state.name, topic).set(len(found))
            if found != self.differences.get(topic, ()):
                for difference in found:
                    log.warning("%s: config not copied: %s", self.state.name, difference)
        for topic in set(self.differences) - set(differences):  # gone from the source
            self.metrics.config_differences.remove(self.state.name, topic)
        self.differences = differences

    def _discover_forever(self) -> None:
        while not self._stop.wait(self.route.discovery_interval):
            self._discover_guarded()

    def _discover_guarded(self) -> None:
        try:
            self.discover()
            for cluster in (self.route.source, self.route.destination):
                self.metrics.unreachable.labels(self.state.name, cluster).set(0)
            self._backoff = 1.0
        except (KafkaException, ConveyorError) as err:
            # Unreachable clusters are retried with back-off; copiers keep what they have meanwhile.
            for cluster in (self.route.source, self.route.destination):
                self.metrics.unreachable.labels(self.state.name, cluster).set(1)
            log.warning("%s: discovery failed (%s); retrying in %.0f s", self.state.name, err, self._backoff)
            self._stop.wait(self._backoff)
            self._backoff = min(self._backoff * 2, 30.0)

    # -- buckets -------------------------------------------------------------------------------

    def _start_copiers(self) -> None:
        """A copier for every owned bucket and every mode the route's topics are copied in, where
        there is none yet: a topic of a new mode starts copiers beside the running ones."""
        modes = self.state.modes()
        with self._copiers_lock:
            if self._stop.is_set():  # the worker is ending: its copiers are being stopped
                return
            for bucket in sorted(self.owned):
                # The exactly-once copier first: the other reads the bucket once it has fenced.
                for mode in sorted(modes, key=lambda m: m is not ReplicationMode.exactly_once):
                    if (bucket, mode) not in self.copiers:
                        after = (self.copiers.get((bucket, ReplicationMode.exactly_once))
                                 if mode is not ReplicationMode.exactly_once else None)
                        copier = BucketCopier(self.state, bucket, mode, after)
                        self.copiers[(bucket, mode)] = copier
                        copier.start()

    def _assigned(self, _consumer, partitions: list[TopicPartition]) -> None:
        with self._copiers_lock:
            self.owned |= {tp.partition for tp in partitions}
        self._start_copiers()
        self._pause_pending = True
        log.info("%s: %s owns buckets %s", self.state.name, self.worker_id, sorted(self.owned))

    def _revoked(self, _consumer, partitions: list[TopicPartition]) -> None:
        released = {tp.partition for tp in partitions}
        with self._copiers_lock:
            self.owned -= released
            leaving = [self.copiers.pop(key) for key in list(self.copiers) if key[0] in released]
        for copier in leaving:
            copier.stop()
        for copier in leaving:
            copier.join(90)
        log.info("%s: %s released buckets %s", self.state.name, self.worker_id, sorted(released))

    def _prepare(self) -> bool:
        """The route topic and the destination topics, retried until the clusters answer."""
        while not self._stop.is_set():
            try:
                ensure_topics(self.state.platform, self.route.destination,
                              {plan.route_topic(self.state.name): self._route_topic_spec()})
                self.discover()
                return True
            except (KafkaException, ConveyorError) as err:
                log.warning("%s: cannot prepare the route yet (%s); retrying in %.0f s", self.state.name, err,
                            self._backoff)
                self._stop.wait(self._backoff)
                self._backoff = min(self._backoff * 2, 30.0)
        return False

    def run(self) -> int:
        """Copy until SIGTERM or SIGINT; returns the exit status."""
        if self.contract_registry is not None:
            self.contract_registry.follow()  # granted topics join as the follower reads them
        try:
            return self._copy()
        finally:
            if self.contract_registry is not None:
                self.contract_registry.stop()

    def _copy(self) -> int:
        route, platform = self.route, self.state.platform
        if not self._prepare():
            return 0
        discovery = threading.Thread(target=self._discover_forever, name="discovery", daemon=True)
        discovery.start()
        membership = kafka.consumer(platform, route.destination, plan.group_id(self.state.name), self.worker_id, {
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000,
            "partition.assignment.strategy": "cooperative-sticky"})
        membership.subscribe([plan.route_topic(self.state.name)], on_assign=self._assigned,
                             on_revoke=self._revoked, on_lost=self._revoked)
        status = 0
        try:
            while not self._stop.is_set():
                membership.poll(0.2)  # membership only: the offsets in these partitions are read by copiers
                if self._pause_pending:
                    membership.pause(membership.assignment())
                    self._pause_pending = False
                failed = [c for c in self._running() if c.error is not None]
                if failed:
                    log.error("%s: bucket %d failed: %s", self.state.name, failed[0].bucket, failed[0].error)
                    status = 1
                    break
        finally:
            self._stop.set()  # discovery as well, which could start copiers
            for copier in self._running():
                copier.stop()
            for copier in self._running():
                copier.join(90)
            membership.close()  # leaves the group at once, so the others take the buckets now
        return status
