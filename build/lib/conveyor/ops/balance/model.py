"""The balance planner's input model and its mutable working state. Pure: no Kafka, no I/O.

The input is a frozen snapshot: brokers (id, rack, tags), partitions (replicas with the preferred
leader first, the current leader, and the partition's load) and the isolation tag of each topic.

Load model, per partition (Cruise Control's network model):

- every replica writes the partition's ``bytes_in`` (the leader from producers, followers by
  replication), so ``bytes_in`` counts on every replica;
- the leader alone sends bytes out: consumer fetches (``bytes_out``) plus one copy of
  ``bytes_in`` to each follower, so a broker's bytes out is mostly the partitions it leads;
- every replica stores ``size`` bytes, which is what a replica move copies.

:class:`ClusterState` is the planner's working copy: replica lists as broker indices, per-broker
aggregates updated incrementally by each action, so no action ever rescans the cluster.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, NamedTuple

from conveyor.ops.balance.errors import ModelError

if TYPE_CHECKING:
    from conveyor.config import Cluster, Topic

#: Resources tracked per broker; indices into :attr:`ClusterState.load`.
REPLICAS, LEADERS, BYTES_IN, BYTES_OUT, DISK = range(5)
RESOURCE_NAMES = ("replicas", "leaders", "bytes_in", "bytes_out", "disk")
#: The loads the planner balances (disk is tracked for reporting and bytes-moved accounting).
BALANCED = (REPLICAS, LEADERS, BYTES_IN, BYTES_OUT)
#: Resources that follow leadership; the rest follow every replica.
_LEADER_RESOURCES = (LEADERS, BYTES_OUT)
_REPLICA_RESOURCES = (REPLICAS, BYTES_IN, DISK)

#: Kafka's "no leader" in partition metadata: the partition is offline.
NO_LEADER = -1


@dataclass(frozen=True)
class Broker:
    id: int
    rack: str | None = None
    tags: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        object.__setattr__(self, "tags", frozenset(self.tags))


@dataclass(frozen=True)
class Partition:
    topic: str
    partition: int
    #: Broker ids; the first is the preferred leader.
    replicas: tuple[int, ...]
    #: The current leader; None means the preferred leader, -1 (Kafka's) an offline partition.
    leader: int | None = None
    #: Bytes per second written by producers.
    bytes_in: float = 0.0
    #: Bytes per second fetched by consumers.
    bytes_out: float = 0.0
    #: Bytes on disk per replica.
    size: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "replicas", tuple(self.replicas))
        name = f"{self.topic}-{self.partition}"
        if not self.replicas:
            raise ModelError(f"partition {name} has no replicas")
        if len(set(self.replicas)) != len(self.replicas):
            raise ModelError(f"partition {name} lists a broker twice: {list(self.replicas)}")
        if min(self.bytes_in, self.bytes_out, self.size) < 0:
            raise ModelError(f"partition {name} has a negative load")

    @property
    def current_leader(self) -> int | None:
        """The broker leading now, or None when the partition is offline."""
        if self.leader is None:
            return self.replicas[0]
        return self.leader if self.leader in self.replicas else None

    @property
    def leader_bytes_out(self) -> float:
        """Bytes out of the leader: consumer fetches plus replication to each follower."""
        return self.bytes_out + self.bytes_in * (len(self.replicas) - 1)


@dataclass(frozen=True)
class ClusterModel:
    """A cluster to balance. Replicas on broker ids absent from ``brokers`` are on dead brokers."""

    brokers: tuple[Broker, ...]
    partitions: tuple[Partition, ...]
    #: Topic -> broker tag: the topic's replicas may only sit on brokers carrying the tag.
    isolation: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "brokers", tuple(self.brokers))
        object.__setattr__(self, "partitions", tuple(self.partitions))
        object.__setattr__(self, "isolation", MappingProxyType(dict(self.isolation)))
        ids = [b.id for b in self.brokers]
        if len(set(ids)) != len(ids):
            raise ModelError(f"broker ids repeat: {sorted(i for i in set(ids) if ids.count(i) > 1)}")
        seen: set[tuple[str, int]] = set()
        for p in self.partitions:
            key = (p.topic, p.partition)
            if key in seen:
                raise ModelError(f"partition {p.topic}-{p.partition} is listed twice")
            seen.add(key)

    def add_broker(self, broker: Broker) -> ClusterModel:
        """The same cluster with a new, empty broker; balancing moves load onto it."""
        return replace(self, brokers=(*self.brokers, broker))

    def remove_broker(self, broker_id: int) -> ClusterModel:
        """The same cluster without ``broker_id``; planning moves every replica off it."""
        if broker_id not in {b.id for b in self.brokers}:
            raise ModelError(f"broker {broker_id} is not in the model")
        return replace(self, brokers=tuple(b for b in self.brokers if b.id != broker_id))

    @classmethod
    def from_platform(
        cls, cluster: Cluster, topics: Mapping[str, Topic], partitions: Iterable[Partition]
    ) -> ClusterModel:
        """Brokers, racks and tags from platform.yaml's cluster; isolation from its topics."""
        brokers = tuple(
            Broker(i, cluster.rack_of(i), frozenset(cluster.tags_of(i))) for i in cluster.broker_ids()
        )
        isolation = {name: t.isolation for name, t in topics.items() if t.isolation}
        return cls(brokers, tuple(partitions), isolation)


class ReplicaMove(NamedTuple):
    """Move the replica of ``partition`` on ``source`` to ``destination`` (state indices).

    The new replica takes the old one's place in the list, so moving the preferred leader's
    replica moves leadership with it.
    """

    partition: int
    source: int
    destination: int


class LeadershipMove(NamedTuple):
    """Make replica ``destination`` the preferred leader instead of ``source``; moves no bytes."""

    partition: int
    source: int
    destination: int


class LeadershipSwap(NamedTuple):
    """Two leadership moves as one action: ``partition`` from ``source`` to ``destination``, and
    ``other`` from ``destination`` back to ``source``. Leader counts stay; the load difference moves.
    """

    partition: int
    source: int
    destination: int
    other: int


class ReplicaSwap(NamedTuple):
    """Two replica moves as one action: ``partition`` from ``source`` to ``destination``, and
    ``other`` from ``destination`` to ``source``. Replica counts stay; the load difference moves.
    """

    partition: int
    source: int
    destination: int
    other: int


Action = ReplicaMove | LeadershipMove | LeadershipSwap | ReplicaSwap


class ClusterState:
    """The planner's working state: indices instead of ids, aggregates kept up to date.

    Brokers are indexed 0..n-1, live brokers first (``broker_ids[i]``), then the dead brokers
    that still hold replicas. ``replicas[p][0]`` is partition ``p``'s preferred leader, which is
    the leader the plan assumes after its preferred leader election.
    """

    def __init__(self, model: ClusterModel) -> None:
        live = sorted(b.id for b in model.brokers)
        dead = sorted({r for p in model.partitions for r in p.replicas} - set(live))
        by_id = {b.id: b for b in model.brokers}
        self.broker_ids: list[int] = live + dead
        self.index: dict[int, int] = {bid: i for i, bid in enumerate(self.broker_ids)}
        self.n_live = len(live)
        n = len(self.broker_ids)
        self.live: list[bool] = [i < self.n_live for i in range(n)]
        self.rack_names: list[str | None] = [by_id[b].rack if b in by_id else None for b in self.broker_ids]
        # A broker with no rack counts as a rack of its own: rack-awareness then reduces to
        # "distinct brokers", which is what an unracked cluster can promise.
        rack_keys: dict[str, int] = {}
        self.rack: list[int] = []
        for i, name in enumerate(self.rack_names):
            key = f"rack:{name}" if name is not None else f"broker:{self.broker_ids[i]}"
            self.rack.append(rack_keys.setdefault(key, len(rack_keys)))

        # Eligibility groups: group 0 is every live broker; one group per isolation tag in use.
        self.isolation = dict(model.isolation)
        tags = sorted(set(self.isolation.values()))
        self.group_tags: list[str | None] = [None, *tags]
        self.group_members: list[list[int]] = [list(range(self.n_live))]
        for tag in tags:
            self.group_members.append([i for i in range(self.n_live) if tag in by_id[self.broker_ids[i]].tags])
        self.group_sets: list[frozenset[int]] = [frozenset(m) for m in self.group_members]
        #: Groups each broker belongs to (empty for a dead broker).
        self.broker_groups: list[list[int]] = [
            [g for g, members in enumerate(self.group_sets) if i in members] for i in range(n)
        ]
        group_of_tag = {tag: g for g, tag in enumerate(self.group_tags)}

        parts = model.partitions
        self.topic_names: list[str] = sorted({p.topic for p in parts})
        topic_index = {t: i for i, t in enumerate(self.topic_names)}
        self.p_topic: list[int] = [topic_index[p.topic] for p in parts]
        self.p_number: list[int] = [p.partition for p in parts]
        self.p_group: list[int] = [group_of_tag.get(self.isolation.get(p.topic), 0) for p in parts]
        self.replicas: list[list[int]] = [[self.index[r] for r in p.replicas] for p in parts]
        self.original: list[tuple[int, ...]] = [tuple(r) for r in self.replicas]
        ones = [1] * len(parts)
        #: Per resource, the load one replica (or the leader) of each partition carries.
        self.weight: list[list[float]] = [
            ones, ones, [float(p.bytes_in) for p in parts], [float(p.leader_bytes_out) for p in parts],
            [p.size for p in parts],
        ]
        self.topic_partitions: list[list[int]] = [[] for _ in self.topic_names]
        for i, t in enumerate(self.p_topic):
            self.topic_partitions[t].append(i)

        self.load: list[list[float]] = [[0] * n for _ in RESOURCE_NAMES]
        self.hosted: list[set[int]] = [set() for _ in range(n)]
        self.led: list[set[int]] = [set() for _ in range(n)]
        #: Leaders of a topic per broker, keyed ``topic * n_brokers + broker``.
        self.topic_leaders: dict[int, int] = {}
        for p, reps in enumerate(self.replicas):
            for b in reps:
                self.hosted[b].add(p)
                for r in _REPLICA_RESOURCES:
                    self.load[r][b] += self.weight[r][p]
            self._add_leader(p, reps[0])
        self.total: list[float] = [sum(col) for col in self.load]
        #: Actions applied so far (the planner reports them per goal).
        self.actions = 0

    # -- queries -------------------------------------------------------------------------------

    @property
    def n_partitions(self) -> int:
        return len(self.replicas)

    def mean(self, resource: int) -> float:
        """Mean load per live broker once every replica sits on a live broker."""
        return self.total[resource] / self.n_live if self.n_live else 0.0

    def eligible(self, p: int, b: int) -> bool:
        """May broker ``b`` hold a replica of ``p`` (live, and tagged if the topic is isolated)?"""
        return b in self.group_sets[self.p_group[p]]

    def rack_free(self, p: int, source: int, destination: int) -> bool:
        """Is ``destination``'s rack unused by ``p``'s replicas other than ``source``?"""
        rack = self.rack
        dest_rack = rack[destination]
        for b in self.replicas[p]:
            if b != source and rack[b] == dest_rack:
                return False
        return True

    def transfer(self, action: Action, resource: int) -> float:
        """How much of ``resource`` the action takes from its source to its destination.

        Negative for a swap that hands the source more than it takes away.
        """
        kind, p, s, d = type(action), action.partition, action.source, action.destination
        w = self.weight[resource]
        if resource not in _LEADER_RESOURCES:
            if kind is ReplicaMove:
                return w[p]
            return w[p] - w[action.other] if kind is ReplicaSwap else 0
        if kind is LeadershipMove:
            return w[p]
        if kind is LeadershipSwap:
            return w[p] - w[action.other]
        out = w[p] if self.replicas[p][0] == s else 0
        if kind is ReplicaSwap and self.replicas[action.other][0] == d:
            out -= w[action.other]
        return out

    def replica_transfers(self, action: Action) -> list[tuple[int, int, int]]:
        """(partition, from, to) for each replica the action copies to another broker."""
        kind, p, s, d = type(action), action.partition, action.source, action.destination
        if kind is ReplicaMove:
            return [(p, s, d)]
        return [(p, s, d), (action.other, d, s)] if kind is ReplicaSwap else []

    def leader_transfers(self, action: Action) -> list[tuple[int, int, int]]:
        """(partition, from, to) for each leadership the action hands over."""
        kind, p, s, d = type(action), action.partition, action.source, action.destination
        if kind is LeadershipMove:
            return [(p, s, d)]
        if kind is LeadershipSwap:
            return [(p, s, d), (action.other, d, s)]
        out = [(p, s, d)] if self.replicas[p][0] == s else []
        if kind is ReplicaSwap and self.replicas[action.other][0] == d:
            out.append((action.other, d, s))
        return out

    def topic_leader_count(self, topic: int, b: int) -> int:
        return self.topic_leaders.get(topic * len(self.broker_ids) + b, 0)

    def name(self, p: int) -> tuple[str, int]:
        return self.topic_names[self.p_topic[p]], self.p_number[p]

    def ids(self, brokers: Iterable[int]) -> list[int]:
        return sorted(self.broker_ids[b] for b in brokers)

    # -- actions -------------------------------------------------------------------------------

    def apply(self, action: Action) -> None:
        kind = type(action)
        if kind is LeadershipMove:
            self.move_leadership(action.partition, action.destination)
        elif kind is LeadershipSwap:
            self.move_leadership(action.partition, action.destination)
            self.move_leadership(action.other, action.source)
        elif kind is ReplicaSwap:
            self.move_replica(action.partition, action.source, action.destination)
            self.move_replica(action.other, action.destination, action.source)
        else:
            self.move_replica(action.partition, action.source, action.destination)

    def move_replica(self, p: int, source: int, destination: int) -> None:
        reps = self.replicas[p]
        slot = reps.index(source)
        if destination in reps:
            raise ValueError(f"broker index {destination} already holds partition {p}")
        if slot == 0:
            self._drop_leader(p, source)
        reps[slot] = destination
        self.hosted[source].discard(p)
        self.hosted[destination].add(p)
        for r in _REPLICA_RESOURCES:
            w = self.weight[r][p]
            self.load[r][source] -= w
            self.load[r][destination] += w
        if slot == 0:
            self._add_leader(p, destination)
        self.actions += 1

    def move_leadership(self, p: int, destination: int) -> None:
        reps = self.replicas[p]
        slot = reps.index(destination)
        if slot == 0:
            return
        source = reps[0]
        self._drop_leader(p, source)
        reps[0], reps[slot] = destination, source
        self._add_leader(p, destination)
        self.actions += 1

    def _add_leader(self, p: int, b: int) -> None:
        self.led[b].add(p)
        self.load[LEADERS][b] += 1
        self.load[BYTES_OUT][b] += self.weight[BYTES_OUT][p]
        key = self.p_topic[p] * len(self.broker_ids) + b
        self.topic_leaders[key] = self.topic_leaders.get(key, 0) + 1

    def _drop_leader(self, p: int, b: int) -> None:
        self.led[b].discard(p)
        self.load[LEADERS][b] -= 1
        self.load[BYTES_OUT][b] -= self.weight[BYTES_OUT][p]
        key = self.p_topic[p] * len(self.broker_ids) + b
        left = self.topic_leaders[key] - 1
        if left:
            self.topic_leaders[key] = left
        else:
            del self.topic_leaders[key]

    def recomputed_load(self) -> list[list[float]]:
        """Aggregates rebuilt from the replica lists (tests compare them with the incremental ones)."""
        load: list[list[float]] = [[0] * len(self.broker_ids) for _ in RESOURCE_NAMES]
        for p, reps in enumerate(self.replicas):
            for b in reps:
                for r in _REPLICA_RESOURCES:
                    load[r][b] += self.weight[r][p]
            for r in _LEADER_RESOURCES:
                load[r][reps[0]] += self.weight[r][p]
        return load


class LoadRanking:
    """The live brokers of each eligibility group sorted by one load, kept sorted as loads change.

    ``keys[group]`` is a list of ``(load, broker)`` in ascending order; after an action, call
    :meth:`refresh` for its two brokers (a bisect and an insert per group, no full re-sort).
    """

    def __init__(self, state: ClusterState, resource: int) -> None:
        self.state, self.load = state, state.load[resource]
        self.keys = [sorted((self.load[b], b) for b in members) for members in state.group_members]
        self.key_of = {b: (self.load[b], b) for b in range(state.n_live)}

    def refresh(self, *brokers: int) -> None:
        for b in brokers:
            old, new = self.key_of.get(b), (self.load[b], b)
            if old is None or old == new:
                continue
            for g in self.state.broker_groups[b]:
                keys = self.keys[g]
                del keys[bisect_left(keys, old)]
                insort(keys, new)
            self.key_of[b] = new
