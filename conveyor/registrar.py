"""The registrar: the platform's one service that grants topic requests. It holds the clusters'
admin credentials, so that no gateway has to.

A request is a record in the contract registry (conveyor.bus.registry.Registry.submit), written
by a gateway or by `conveyor topics request`. The registrar follows the registry and decides each
pending request in the order asked: the partition budget of every cluster it lands on, then the
topic with its configs on every cluster, its ACLs, version 1 of its contract, and last the grant.
Every step before the grant is idempotent, so a registrar killed half-way (or a cluster down)
leaves the request pending, and the next round finishes it. A budget passed or a contract the
registry refuses is recorded as the request's refusal, which the gateway answers as it was.
"""

from __future__ import annotations

import json
import logging
import threading
from datetime import datetime, timezone
from typing import Any

from confluent_kafka import KafkaException
from prometheus_client import CollectorRegistry, Counter, Gauge

from conveyor import kafka
from conveyor.acls import provisioner as acl_provisioner
from conveyor.bus.registry import Registry, RegistryMissing, RegistryUnavailable
from conveyor.bus.registry_state import RequestRecord, RequestState, subject_of
from conveyor.bus.requests import check_budgets, declared, decided, granted_topics
from conveyor.config import Platform
from conveyor.errors import Refusal
from conveyor.topics.provisioner import ProvisionError, ensure_topics

log = logging.getLogger("conveyor.registrar")

_TIMEOUT = 15.0
#: Seconds between rounds when nothing changed: a request is also decided as soon as it is read.
ROUND = 1.0


def held_partitions(platform: Platform, cluster: str, besides: str) -> int:
    """Partitions the cluster holds now, its internal topics' included, but not those of ``besides``
    (created by an earlier round that did not finish its grant)."""
    metadata = kafka.admin(platform, cluster).list_topics(timeout=_TIMEOUT)
    return sum(len(t.partitions) for name, t in metadata.topics.items() if not t.error and name != besides)


class Registrar:
    """Grants requested topics; no I/O until :meth:`start`."""

    def __init__(self, platform: Platform, client_id: str = "conveyor-registrar") -> None:
        self.platform = platform.acting_as(None)  # the platform's admin: topics and ACLs on every cluster
        self.registry = Registry(self.platform, client_id)
        self.metrics = CollectorRegistry()
        self.decisions = Counter("conveyor_registrar_decisions", "Topic requests decided, by outcome (granted, or "
                                 "the refusal's reason).", ["outcome"], registry=self.metrics)
        self.pending_requests = Gauge("conveyor_registrar_pending_requests", "Topic requests not decided yet.",
                                      registry=self.metrics)
        self.unfinished = Counter("conveyor_registrar_unfinished", "Rounds that left a request pending (a cluster "
                                  "or the registry did not answer); the next round finishes it.",
                                  registry=self.metrics)
        self._last_error: str | None = None

    def start(self) -> None:
        self.registry.start()

    def stop(self) -> None:
        self.registry.stop()

    def pending(self) -> list[RequestRecord]:
        with self.registry.reading() as state:
            waiting = [r for r in state.requests.values() if r.state == RequestState.pending]
        self.pending_requests.set(len(waiting))
        return sorted(waiting, key=lambda r: (r.requested_at, r.topic))

    def decide_pending(self) -> int:
        """One round: every pending request decided, or left for the next round; how many were."""
        return sum(self.decide(record) is not None for record in self.pending())

    def decide(self, record: RequestRecord) -> RequestRecord | None:
        """Grant or refuse one pending request; None when a cluster or the registry did not answer
        (it stays pending)."""
        now = datetime.now(timezone.utc)
        with self.registry.reading() as state:
            platform = self.platform.with_requested({**granted_topics(state.requests),
                                                     record.topic: declared(record)})
        clusters = platform.clusters_of(record.topic)
        try:
            held = {name: held_partitions(platform, name, record.topic) for name in clusters}
            check_budgets(platform, held, record.partitions)
            for cluster in clusters:
                ensure_topics(platform, cluster, {record.topic: platform.topics[record.topic]})
            acl_provisioner.apply_secured(platform, clusters)
            self.registry.register(subject_of(record.topic), json.loads(record.contract), record.requested_by)
            decision = decided(record, now)
        except RegistryUnavailable as err:
            return self._unfinished(record, str(err))
        except Refusal as refusal:  # a budget passed, a contract the registry refuses
            decision = decided(record, now, refusal)
        except (ProvisionError, KafkaException) as err:
            return self._unfinished(record, str(err))
        try:
            if not self.registry.decide(record, decision):
                return None  # decided elsewhere, or asked again meanwhile: the next round sees it
        except RegistryUnavailable as err:
            return self._unfinished(record, str(err))
        outcome = decision.state if decision.refusal is None else str(decision.refusal["error"])
        self.decisions.labels(outcome).inc()
        log.info("topic %s for %s: %s", record.topic, record.requested_by,
                 "granted" if decision.refusal is None else f"refused: {decision.refusal['message']}")
        self._last_error = None
        return decision

    def _unfinished(self, record: RequestRecord, why: str) -> None:
        self.unfinished.inc()
        self._last_error = f"{record.topic}: {why}"
        log.warning("topic %s for %s stays pending: %s", record.topic, record.requested_by, why)
        return None

    def run(self, stop: threading.Event, once: bool = False) -> int:
        try:
            self.start()
        except RegistryMissing as err:  # still followed: requests count from the topic's creation
            log.warning("%s; no request can be made until then", err)
        try:
            while True:
                self.decide_pending()
                if once or stop.wait(ROUND):
                    return 0
        finally:
            self.stop()

    def health(self) -> tuple[bool, dict[str, Any]]:
        pending = self.pending()
        return self._last_error is None, {"pending": [r.topic for r in pending],
                                          **({"last_error": self._last_error} if self._last_error else {})}
