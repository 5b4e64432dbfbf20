"""Which nodes serve a (topic, group): read from the Kafka group's own membership.

Each node's consumer joins the group with ``client.id = CLIENT_ID_PREFIX + host:port``, so the
group coordinator already knows every serving node and what it holds; no registry of our own.
A share-backed pair is read from a presence group of its own (``share_reader``): the Python
AdminClient cannot describe share groups.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from confluent_kafka.admin import AdminClient, MemberDescription

from conveyor import kafka
from conveyor.dispatch.errors import NodeStopping
from conveyor.dispatch.source import CLIENT_ID_PREFIX, MembershipSource

#: Seconds a membership answer is reused: clients locate every few seconds each.
_CACHE_FOR = 1.0
#: Seconds a Locate asks again while the group's coordinator moves, before it answers UNAVAILABLE.
_COORDINATOR_PATIENCE = 5.0


@dataclass(frozen=True)
class ServingNode:
    address: str
    partitions: tuple[int, ...]


def serving_nodes(members: Iterable[MemberDescription], topic: str,
                  needs_partitions: bool = True) -> list[ServingNode]:
    """Dispatcher members holding partitions of ``topic`` (or, ``needs_partitions`` False, every
    dispatcher member: a share group serves every partition from every node), by address. Pure."""
    held: dict[str, set[int]] = {}
    for member in members:
        if not member.client_id.startswith(CLIENT_ID_PREFIX):
            continue
        address = member.client_id[len(CLIENT_ID_PREFIX):]
        partitions = {tp.partition for tp in member.assignment.topic_partitions if tp.topic == topic}
        if partitions or not needs_partitions:
            held.setdefault(address, set()).update(partitions)
    return [ServingNode(address, tuple(sorted(p))) for address, p in sorted(held.items())]


class Membership:
    def __init__(self, admin: AdminClient) -> None:
        self._admin: AdminClient | None = admin
        self._lock = threading.Lock()
        self._cache: dict[tuple[str, str], tuple[float, list[ServingNode]]] = {}

    def nodes(self, topic: str, source: MembershipSource) -> list[ServingNode]:
        group = source.group
        with self._lock:
            cached = self._cache.get((topic, group))
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        admin = self._admin
        if admin is None:
            raise NodeStopping("the node is stopping; locate another")
        description = kafka.describe_groups(admin, [group], _COORDINATOR_PATIENCE)[group]
        nodes = serving_nodes(description.members, topic, source.needs_partitions)
        with self._lock:
            self._cache[(topic, group)] = (time.monotonic() + _CACHE_FOR, nodes)
        return nodes

    def close(self) -> None:
        """Let the admin client go now rather than whenever the node object is collected."""
        self._admin = None
