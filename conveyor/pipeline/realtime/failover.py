"""The views through a Redis Cluster failover: calls that wait for a replica to take over, and a
batch's writes held by a replica before the batch ends.

redis-py's cluster client tries a call again at once when a node fails, without a pause, so its
tries are spent long before a replica takes over (a node is judged failed after
``cluster-node-timeout``, 15 s by default). :func:`through_failover` tries again with a growing
pause for up to :data:`FAILOVER_SECONDS`: every call of the views is idempotent (store.py), so
sending one again is safe.

Redis replicates after it answers. A master killed right after a batch would take the batch's last
writes with it, while Spark's checkpoint has already moved past them, and the replica that takes
over would serve views without them. So a batch ends only once a replica of each master has
acknowledged every write made there (:func:`await_replicas`). A master that cannot show it (it
died, it is no longer a master, no replica answered in time) leaves the batch's writes in doubt,
and the job writes the batch again: every write of the views is idempotent (store.py).

On one server, or a cluster without replicas, there is nothing to wait for: a restart keeps what
the append-only file holds, and the runtime's Redis writes it before it answers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TypeVar

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot
from redis.exceptions import ClusterDownError, NoScriptError, SlotNotCoveredError, TryAgainError

from conveyor.pipeline.errors import PipelineError

T = TypeVar("T")

#: How long a call to a Redis Cluster keeps trying while a failover runs: Redis's default node
#: timeout (15 s), the replica's election, and room to spare.
FAILOVER_SECONDS = 60.0
#: How long a batch waits for a replica of each master to acknowledge its writes.
REPLICA_WAIT_MS = 10_000
#: Times a call is sent again because the server lost its scripts (it restarted in between).
SCRIPT_RELOADS = 3
#: What a cluster answers while a failover runs: the dead node refuses, the cluster is down for its
#: slots, or they are not served yet; a promoted replica has no scripts cached.
_FAILING_OVER = (redis.ConnectionError, redis.TimeoutError, ClusterDownError, TryAgainError, SlotNotCoveredError,
                 NoScriptError)


class WritesInDoubtError(PipelineError):
    """A Redis Cluster master that took a batch's writes cannot show that a replica holds them: it
    died (its replica may have taken over without the last of them), it is no longer a master, or
    no replica acknowledged in time. Writing the batch again puts back whatever was lost."""


def through_failover(client: redis.Redis | RedisCluster, call: Callable[[], T]) -> T:
    """``call()``; on a Redis Cluster, tried again with a growing pause while a failover runs. One
    server's client already pauses between its own tries (store.connect_to), but a pipeline it sends
    again to a restarted server finds the scripts gone from its cache (NoScriptError): ``call()``
    builds its pipeline anew, and a new pipeline loads them first."""
    if not isinstance(client, RedisCluster):
        for attempt in range(1, SCRIPT_RELOADS + 1):
            try:
                return call()
            except NoScriptError:
                if attempt == SCRIPT_RELOADS:
                    raise
        raise AssertionError("unreachable")
    deadline, pause = time.monotonic() + FAILOVER_SECONDS, 0.1
    while True:
        try:
            return call()
        except _FAILING_OVER:
            if time.monotonic() + pause > deadline:
                raise
            # The client asks its default node how to route a command (a pipeline's EVAL): when that
            # node is the dead one, every try fails the same way until another is chosen.
            client.replace_default_node()
            time.sleep(pause)
            pause = min(pause * 2, 2.0)


def replicated_masters(client: redis.Redis | RedisCluster) -> tuple[ClusterNode, ...]:
    """The Redis Cluster masters that have a replica, as the client knows them now (none on one
    server): what :func:`await_replicas` checks after a batch's writes."""
    if not isinstance(client, RedisCluster):
        return ()
    return tuple({nodes[0].name: nodes[0] for nodes in client.nodes_manager.slots_cache.values()
                  if len(nodes) > 1}.values())


def await_replicas(client: redis.Redis | RedisCluster, masters: Sequence[ClusterNode], prefix: str,
                   timeout_ms: int = REPLICA_WAIT_MS) -> None:
    """Return once a replica of each of ``masters`` has acknowledged every write made on it so far,
    by anyone (the Spark tasks' claims too). WAIT counts the replicas that hold a connection's last
    write, so each master gets a marker write (a key under ``prefix``) and WAIT on the same
    connection; a master's replication stream keeps order, so a replica that holds the marker holds
    everything before it. Raise :class:`WritesInDoubtError`, with the cluster's map asked again,
    when a master cannot show it."""
    if not masters:
        return
    assert isinstance(client, RedisCluster)
    doubts = []
    for node in masters:
        marker = _marker_on(client, node, prefix)
        if marker is None:
            doubts.append(f"{node.name} serves no slot any more")
            continue
        pipe = client.get_redis_connection(node).pipeline(transaction=False)
        pipe.set(marker, "1", ex=60)
        pipe.execute_command("WAIT", 1, timeout_ms)
        try:
            acked = pipe.execute()[1]
        except redis.RedisError as err:  # gone (ConnectionError), or a replica now (MOVED)
            doubts.append(f"{node.name}: {type(err).__name__}: {err}")
            continue
        if int(acked) < 1:
            doubts.append(f"{node.name}: no replica acknowledged within {timeout_ms} ms")
    if doubts:
        client.nodes_manager.initialize()
        raise WritesInDoubtError("Redis Cluster masters could not show that a replica holds the batch's writes: "
                                 + "; ".join(doubts))


def _marker_on(client: RedisCluster, node: ClusterNode, prefix: str) -> str | None:
    """A key under ``prefix`` in a slot ``node`` serves (each master serves a share of the slots,
    so the search is short); None if it serves none."""
    slots = client.nodes_manager.slots_cache
    for n in range(1 << 16):
        owners = slots.get(key_slot(str(n).encode()))
        if owners and owners[0] == node:
            return f"{prefix}{{{n}}}"
    return None
