"""Whether the lake may take a topic's gateway verdicts as they stand: only the bus can write it.

The gateway checks every event against its contract and says which version in the record's
contract header (conveyor_sdk.contract); the replicator copies records and headers as they are. On
a topic that only those two principals may write, on every cluster that holds it, a record's header
is the gateway's: nobody else could have planted it. The lake then parses such records in the JVM
(conveyor.pipeline.fast_parse) instead of checking each one again in a Python worker. Which
principals may write comes from the clusters' ACLs as the lake reads them at each run, or, for
``config check``, from the ACLs platform.yaml asks for; a cluster without an authorizer lets anyone
write. The platform's super users are the admin that runs it, trusted as the bus itself is.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from conveyor.acls.grants import Grant, Pattern, Resource, is_secured, principal
from conveyor.config import Cluster, Part, Platform, Security

#: The principals whose records carry a verdict the lake may trust.
BUS_WRITERS = frozenset({principal(Part.gateway.user), principal(Part.replicator.user)})
#: Any principal at all, as an ACL names it.
ANYONE = "User:*"
_WRITES = frozenset({"WRITE", "ALL"})


@dataclass(frozen=True)
class Trust:
    topic: str
    #: Whether a record naming a version the registry holds is parsed in the JVM, unchecked.
    trusted: bool
    #: Why, for `config check` and the run's progress.
    why: str


def grants_writing(grants: Iterable[Grant], topic: str) -> set[str]:
    """The principals an ALLOW binding of ``grants`` lets write ``topic``: by its name, by the
    wildcard, or by a prefix of its name."""
    def names(grant: Grant) -> bool:
        if grant.pattern == Pattern.prefixed:
            return topic.startswith(grant.name)
        return grant.name in (topic, "*")

    return {g.principal for g in grants if g.resource == Resource.topic and g.operation in _WRITES and names(g)}


def judge(topic: str, writers: dict[str, set[str] | str]) -> Trust:
    """``writers``: per cluster holding the topic, the principals that may write it, or why that is
    not known (the ACLs unreadable, no authorizer)."""
    if not writers:
        return Trust(topic, False, "no cluster holds it")
    for cluster, found in sorted(writers.items()):
        if isinstance(found, str):
            return Trust(topic, False, f"cluster {cluster}: {found}")
        others = sorted(found - BUS_WRITERS)
        if others:
            named = "anyone" if ANYONE in others else ", ".join(others)
            return Trust(topic, False, f"{named} may write it on cluster {cluster}; every record is checked in full")
    return Trust(topic, True, f"only the bus writes it on {', '.join(sorted(writers))}: the gateway's verdict stands")


def as_read(trust: Trust, blocker: str | None) -> Trust:
    """``trust`` as the lake can use it: a ``blocker`` (the contract or the registry rules the JVM
    out: conveyor.pipeline.fast_parse.jvm_blocker) has every record checked in full all the same."""
    if trust.trusted and blocker:
        return Trust(trust.topic, False, f"{blocker}; every record is checked in full")
    return trust


_OPEN = "not secured (no authorizer): anyone may write"


def _secured(cluster: Cluster) -> bool:
    """A cluster `conveyor up` starts secured, or one whose client settings authenticate."""
    return cluster.security != Security.plaintext or is_secured(cluster)


def planned_trust(platform: Platform, topic: str) -> Trust:
    """The trust platform.yaml's ACLs give ``topic``, as `acl apply` would set them (for `config check`)."""
    from conveyor.acls.parts import wanted

    writers: dict[str, set[str] | str] = {}
    for cluster in platform.clusters_of(topic):
        writers[cluster] = (grants_writing(wanted(platform, cluster)[0], topic) if _secured(platform.cluster(cluster))
                            else _OPEN)
    return judge(topic, writers)


def live_trust(platform: Platform, topic: str) -> Trust:
    """The trust the clusters' ACLs give ``topic`` now, as the lake's principal reads them (it may
    describe them: conveyor.acls.parts.lake)."""
    writers: dict[str, set[str] | str] = {}
    for cluster in platform.clusters_of(topic):
        writers[cluster] = _live_writers(platform, cluster, topic) if _secured(platform.cluster(cluster)) else _OPEN
    return judge(topic, writers)


def _live_writers(platform: Platform, cluster: str, topic: str) -> set[str] | str:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType,
                                       ResourceType)

    from conveyor import kafka

    # MATCH: the bindings on the topic's own name, on the wildcard and on every prefix of it, from any host.
    matching = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.MATCH, None, None, AclOperation.ANY,
                                AclPermissionType.ALLOW)
    client = kafka.admin(platform, cluster)
    try:
        bindings = client.describe_acls(matching, request_timeout=15).result()
    except KafkaException as exc:
        return f"its ACLs could not be read ({exc.args[0].str() if exc.args else exc})"
    return {b.principal for b in bindings if b.operation.name in _WRITES}
