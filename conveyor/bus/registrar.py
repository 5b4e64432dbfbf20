"""Grants topic requests: the declaration into requested-topics.yaml, then the topic on every
cluster with its configs and ACLs, in that order.

The file is written first, whole, so a request cut short after it (a cluster down, the process
killed) is finished by asking again (a request is idempotent) or by `conveyor topics apply`; the
clusters are never ahead of the file. Requests are taken one at a time on a machine (a lock beside
the file), so two services asking for one name at once get the topic and a 409.

Creating topics and ACLs is the platform's admin work: it runs with the clusters' ``client``
settings, as `topics apply` and `acl apply` do, never with the gateway's own principal.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from confluent_kafka import KafkaException

from conveyor import kafka
from conveyor.acls import provisioner as acl_provisioner
from conveyor.config import Platform
from conveyor.config.requested import read_requested, write_requested
from conveyor.errors import Refusal
from conveyor.files import exclusive, replace_atomically
from conveyor.topics.contracts import ContractError, compile_contract
from conveyor.topics.provisioner import ProvisionError, ensure_topics
from conveyor.bus.requests import InvalidRequest, TopicRequest, TopicTaken, check_budgets, requested_topic

_TIMEOUT = 15.0
LOCK_FILE = ".requested-topics.lock"


class RequestNotFinished(Refusal):
    """A cluster could not be read or brought to the request yet; asking again finishes it."""

    status, reason = 503, "not_finished"


@dataclass(frozen=True)
class Granted:
    topic: str
    partitions: int
    #: Clusters that carry the topic now.
    clusters: tuple[str, ...]
    #: Routes that copy it.
    routes: tuple[str, ...]
    requested_by: str
    #: False when the same request had been granted before (asked again, it changes nothing).
    new: bool

    def body(self) -> dict[str, object]:
        return {"topic": self.topic, "partitions": self.partitions, "clusters": list(self.clusters),
                "routes": list(self.routes), "requested_by": self.requested_by, "new": self.new}


def held_partitions(platform: Platform, cluster: str) -> int:
    """Partitions the cluster holds now, its internal topics' included."""
    try:
        metadata = kafka.admin(platform, cluster).list_topics(timeout=_TIMEOUT)
    except KafkaException as exc:
        raise RequestNotFinished(f"cluster {cluster} did not answer ({exc}); nothing was recorded, ask again") from None
    return sum(len(t.partitions) for t in metadata.topics.values() if not t.error)


def grant(platform: Platform, request: TopicRequest, requester: str) -> Granted:
    try:
        compile_contract(request.topic, request.contract)
    except ContractError as err:
        raise InvalidRequest(str(err), field="contract") from None
    admin = platform.acting_as(None)
    with exclusive(platform.root / LOCK_FILE):
        requested = read_requested(platform.root)
        current = admin.with_requested(requested)
        spec = requested_topic(request, requester, current)
        assert spec.contract is not None
        contract_file = current.resolve(spec.contract)
        existing = current.topics.get(request.topic)
        new = existing is None
        if existing is not None:
            same_contract = contract_file.is_file() and json.loads(contract_file.read_text()) == request.contract
            if existing != spec or not same_contract:
                who = f"requested by {existing.requested_by}" if existing.requested_by else "declared in platform.yaml"
                raise TopicTaken(f"topic {request.topic} exists ({who}) with another declaration or contract; "
                                 "pick another name", topic=request.topic)
        else:
            held = {name: held_partitions(admin, name) for name in current.clusters}
            check_budgets(current, held, spec.partitions)
            replace_atomically(contract_file, json.dumps(request.contract, indent=2).encode() + b"\n")
            write_requested(platform.root, {**requested, request.topic: spec})
        granted = current.with_requested({**requested, request.topic: spec})
        clusters = tuple(granted.clusters_of(request.topic))
        try:
            for cluster in clusters:
                ensure_topics(granted, cluster, {request.topic: spec})
            acl_provisioner.apply_secured(granted, clusters)
        except (ProvisionError, KafkaException) as err:
            raise RequestNotFinished(f"topic {request.topic} is recorded in requested-topics.yaml but not yet on every "
                                     f"cluster ({err}); ask again, or run `conveyor topics apply`") from None
    routes = tuple(sorted(name for name in granted.routes if request.topic in granted.route_topics(name)))
    return Granted(request.topic, spec.partitions, clusters, routes, requester, new)
