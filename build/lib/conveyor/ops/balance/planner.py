"""Run the goals over a cluster model and describe the result as a plan. Pure: no Kafka, no I/O.

:func:`plan` first asks every hard goal whether it can be met at all (so the error names the real
cause: a tag on too few brokers, too few racks), then runs the goals in priority order, each one
with the goals before it as its judges, and reads the plan off the final state: the replica moves,
the new replica lists with the preferred leader first, the partitions that need a preferred
leader election, the bytes to copy and the per-broker load before and after.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from conveyor.ops.balance.errors import HardGoalError, describe_partitions
from conveyor.ops.balance.goals import (
    THRESHOLD, BytesInGoal, BytesOutGoal, Goal, IsolationGoal, LeaderCountGoal, LiveBrokersGoal,
    RackAwareGoal, ReplicaCountGoal, accepts,
)
from conveyor.ops.balance.model import (
    BALANCED, DISK, RESOURCE_NAMES, Action, ClusterModel, ClusterState, LeadershipMove, ReplicaMove,
)

#: The four balanced loads, by name, in the order the stats list them.
LOADS = tuple(RESOURCE_NAMES[r] for r in BALANCED)


class MinimalMovementGoal(Goal):
    """Lowest priority: undo every change that all the goals above accept undone.

    Earlier goals may shuffle a replica more than needed (moved by one goal, made unnecessary by
    another). Undoing, biggest partitions first, is what keeps the bytes a plan moves small.
    """

    name = "MinimalMovement"

    def optimize(self, state: ClusterState, accepted_by: Sequence[Goal]) -> None:
        size = state.weight[DISK]
        changed = [p for p, reps in enumerate(state.replicas) if tuple(reps) != state.original[p]]
        for p in sorted(changed, key=lambda q: -size[q]):
            original, reps = state.original[p], state.replicas[p]
            for b in [b for b in reps if b not in original]:
                for o in original:
                    if o not in reps and accepts(accepted_by, ReplicaMove(p, b, o), state):
                        state.move_replica(p, b, o)
                        break
            first = original[0]
            if reps[0] != first and first in reps \
                    and accepts(accepted_by, LeadershipMove(p, reps[0], first), state):
                state.move_leadership(p, first)

    def is_action_acceptable(self, action: Action, state: ClusterState) -> bool:
        return True


def default_goals(threshold: float = THRESHOLD) -> list[Goal]:
    """Hard goals first, then the soft balance goals, then the cost of moving bytes."""
    return [
        LiveBrokersGoal(), RackAwareGoal(), IsolationGoal(),
        ReplicaCountGoal(threshold), LeaderCountGoal(threshold),
        BytesInGoal(threshold), BytesOutGoal(threshold),
        MinimalMovementGoal(),
    ]


@dataclass(frozen=True)
class Move:
    """One replica copied from ``source`` to ``destination`` (broker ids)."""

    topic: str
    partition: int
    source: int
    destination: int
    size: int


@dataclass(frozen=True)
class PartitionChange:
    topic: str
    partition: int
    replicas_before: tuple[int, ...]
    #: The new replica list; its first broker is the preferred leader.
    replicas_after: tuple[int, ...]
    #: The broker leading now (None: offline).
    leader_before: int | None
    bytes_to_move: int

    @property
    def preferred_leader(self) -> int:
        return self.replicas_after[0]


@dataclass(frozen=True)
class BrokerLoad:
    broker: int
    rack: str | None
    live: bool
    replicas: int
    leaders: int
    bytes_in: float
    bytes_out: float
    disk: int

    def get(self, load: str) -> float:
        return getattr(self, load)


@dataclass(frozen=True)
class LoadStats:
    max: float
    mean: float
    min: float

    @property
    def max_over_mean(self) -> float:
        return self.max / self.mean if self.mean else 1.0


@dataclass(frozen=True)
class Plan:
    moves: tuple[Move, ...]
    #: Partitions whose replica list changes (members or order), in topic/partition order.
    changes: tuple[PartitionChange, ...]
    #: Partitions whose leader after the reassignment is not their new preferred leader.
    elections: tuple[tuple[str, int], ...]
    bytes_to_move: int
    before: tuple[BrokerLoad, ...]
    after: tuple[BrokerLoad, ...]
    #: Per load name ("replicas", "leaders", "bytes_in", "bytes_out"), over live brokers.
    stats_before: Mapping[str, LoadStats]
    stats_after: Mapping[str, LoadStats]
    #: Actions each goal took while planning (moves undone later still count here).
    actions_per_goal: tuple[tuple[str, int], ...] = field(default=())

    @property
    def is_empty(self) -> bool:
        return not self.changes and not self.elections

    def assignment(self) -> dict[tuple[str, int], tuple[int, ...]]:
        """The new replica lists of the changed partitions."""
        return {(c.topic, c.partition): c.replicas_after for c in self.changes}

    def to_reassignment_json(self, indent: int | None = None) -> str:
        """Kafka's reassignment file (kafka-reassign-partitions --execute) for changed partitions."""
        partitions = [
            {"topic": c.topic, "partition": c.partition, "replicas": list(c.replicas_after),
             "log_dirs": ["any"] * len(c.replicas_after)}
            for c in self.changes
        ]
        return json.dumps({"version": 1, "partitions": partitions}, indent=indent)

    def to_election_json(self, indent: int | None = None) -> str:
        """kafka-leader-election --path-to-json-file input for a preferred election."""
        partitions = [{"topic": t, "partition": n} for t, n in self.elections]
        return json.dumps({"partitions": partitions}, indent=indent)


def plan(model: ClusterModel, goals: Sequence[Goal] | None = None) -> Plan:
    """Balance ``model`` under ``goals`` (default: :func:`default_goals`)."""
    goals = list(default_goals() if goals is None else goals)
    state = ClusterState(model)
    for goal in goals:
        if goal.hard:
            goal.check_feasible(state)
    done: list[Goal] = []
    counts = []
    for goal in goals:
        before = state.actions
        goal.optimize(state, done)
        counts.append((goal.name, state.actions - before))
        done.append(goal)
    for goal in goals:
        left = goal.violations(state) if goal.hard else []
        if left:  # a goal whose optimize returned without meeting itself: a bug, not a plan
            names = [state.name(p) for p in left]
            raise HardGoalError(goal.name, f"still broken for {describe_partitions(names)}", partitions=names)
    return _read_plan(model, state, tuple(counts))


def _read_plan(model: ClusterModel, state: ClusterState, counts: tuple[tuple[str, int], ...]) -> Plan:
    ids = state.broker_ids
    moves: list[Move] = []
    changes: list[PartitionChange] = []
    elections: list[tuple[str, int]] = []
    final: list[tuple[int, ...]] = []
    for p, part in enumerate(model.partitions):
        after = tuple(ids[b] for b in state.replicas[p])
        if after[0] == part.replicas[0] and set(after) == set(part.replicas):
            after = part.replicas  # only followers reordered: nothing to do
        final.append(after)
        current = part.current_leader
        if after[0] != current:
            elections.append((part.topic, part.partition))
        if after == part.replicas:
            continue
        removed = [b for b in part.replicas if b not in after]
        added = [b for b in after if b not in part.replicas]
        moves.extend(Move(part.topic, part.partition, s, d, part.size) for s, d in zip(removed, added))
        changes.append(PartitionChange(
            part.topic, part.partition, part.replicas, after, current, part.size * len(added)
        ))
    changes.sort(key=lambda c: (c.topic, c.partition))
    elections.sort()
    before = _loads(model, [p.replicas for p in model.partitions], [p.current_leader for p in model.partitions])
    after_loads = _loads(model, final, [reps[0] for reps in final])
    return Plan(
        moves=tuple(sorted(moves, key=lambda m: (m.topic, m.partition, m.source))),
        changes=tuple(changes),
        elections=tuple(elections),
        bytes_to_move=sum(c.bytes_to_move for c in changes),
        before=before,
        after=after_loads,
        stats_before=_stats(before),
        stats_after=_stats(after_loads),
        actions_per_goal=counts,
    )


def _loads(model: ClusterModel, replicas: Sequence[tuple[int, ...]],
           leaders: Sequence[int | None]) -> tuple[BrokerLoad, ...]:
    """Per-broker load from replica lists and leaders (live brokers, then dead ones holding data)."""
    racks = {b.id: b.rack for b in model.brokers}
    rows: dict[int, list[float]] = {b.id: [0, 0, 0.0, 0.0, 0] for b in model.brokers}
    for part, reps, leader in zip(model.partitions, replicas, leaders):
        for b in reps:
            row = rows.setdefault(b, [0, 0, 0.0, 0.0, 0])
            row[0] += 1
            row[2] += part.bytes_in
            row[4] += part.size
        if leader is not None:
            row = rows.setdefault(leader, [0, 0, 0.0, 0.0, 0])
            row[1] += 1
            row[3] += part.leader_bytes_out
    live = sorted(racks)
    dead = sorted(set(rows) - set(racks))
    return tuple(
        BrokerLoad(b, racks.get(b), b in racks, int(r[0]), int(r[1]), r[2], r[3], int(r[4]))
        for b in live + dead for r in [rows[b]]
    )


def _stats(loads: Sequence[BrokerLoad]) -> Mapping[str, LoadStats]:
    live = [row for row in loads if row.live]
    stats = {}
    for name in LOADS:
        values = [row.get(name) for row in live] or [0.0]
        stats[name] = LoadStats(max(values), sum(values) / len(values), min(values))
    return MappingProxyType(stats)
