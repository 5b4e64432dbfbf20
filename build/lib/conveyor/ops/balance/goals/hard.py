"""Hard goals: live brokers, rack-awareness, isolation tags. Each raises its
:class:`~conveyor.ops.balance.errors.HardGoalError` when it cannot be met."""

from __future__ import annotations

from collections.abc import Sequence

from conveyor.ops.balance import errors
from conveyor.ops.balance.goals.base import Goal, accepts
from conveyor.ops.balance.model import (
    LEADERS, REPLICAS, Action, ClusterState, LeadershipMove, LoadRanking, ReplicaMove,
)


class _HardGoal(Goal):
    hard = True
    error: type[errors.HardGoalError] = errors.HardGoalError

    def _relocate(self, state: ClusterState, ranking: LoadRanking, p: int, source: int,
                  checks: Sequence[Goal]) -> None:
        """Move ``p``'s replica off ``source`` to the eligible broker with the fewest replicas.

        A destination on a rack the partition does not use yet is preferred even by goals that
        rank above rack-awareness, so that an early repair does not create a later one.
        """
        reps, fallback = state.replicas[p], None
        for _, d in ranking.keys[state.p_group[p]]:
            if d in reps:
                continue
            move = ReplicaMove(p, source, d)
            if not accepts(checks, move, state):
                continue
            if state.rack_free(p, source, d):
                fallback = move
                break
            fallback = fallback or move
        if fallback is None:
            members = state.group_members[state.p_group[p]]
            raise self.error(
                self.name,
                f"no eligible broker can take the replica of {errors.describe_partitions([state.name(p)])}"
                f" on broker {state.broker_ids[source]} (eligible: {state.ids(members)})",
                partitions=[state.name(p)], brokers=state.ids(members),
            )
        state.apply(fallback)
        ranking.refresh(source, fallback.destination)


class LiveBrokersGoal(_HardGoal):
    """Every replica on a live broker: replicas of removed or dead brokers move away."""

    name = "LiveBrokers"
    error = errors.LiveBrokersError

    def check_feasible(self, state: ClusterState) -> None:
        names = [state.name(p) for p, reps in enumerate(state.replicas) if len(reps) > state.n_live]
        if names:
            live = state.ids(range(state.n_live))
            raise errors.LiveBrokersError.too_few(names, live)

    def violations(self, state: ClusterState) -> list[int]:
        return sorted({p for b in range(state.n_live, len(state.broker_ids)) for p in state.hosted[b]})

    def optimize(self, state: ClusterState, accepted_by: Sequence[Goal]) -> None:
        checks, ranking = [*accepted_by, self], LoadRanking(state, REPLICAS)
        leaders = state.load[LEADERS]
        for dead in range(state.n_live, len(state.broker_ids)):
            for p in sorted(state.hosted[dead]):
                reps = state.replicas[p]
                if reps[0] == dead:
                    # Hand leadership to a live follower first: the new replica starts empty.
                    for d in sorted((b for b in reps if state.live[b]), key=leaders.__getitem__):
                        if accepts(checks, LeadershipMove(p, dead, d), state):
                            state.move_leadership(p, d)
                            break
                self._relocate(state, ranking, p, dead, checks)

    def is_action_acceptable(self, action: Action, state: ClusterState) -> bool:
        live = state.live  # a swap (four fields) also sends something to its source
        return live[action.destination] and (len(action) == 3 or live[action.source])


class RackAwareGoal(_HardGoal):
    """The replicas of a partition sit on distinct racks (a broker without a rack is its own)."""

    name = "RackAware"
    error = errors.RackAwareError

    def check_feasible(self, state: ClusterState) -> None:
        spans = [len({state.rack[b] for b in members}) for members in state.group_members]
        blocked: dict[tuple[int, int], list[int]] = {}
        for p, reps in enumerate(state.replicas):
            group = state.p_group[p]
            if len(state.group_members[group]) >= len(reps) > spans[group]:
                blocked.setdefault((group, len(reps)), []).append(p)
        if not blocked:
            return
        (group, rf), parts = next(iter(blocked.items()))
        racks: dict[str, list[int]] = {}
        for b in state.group_members[group]:
            name = state.rack_names[b] or f"(none, broker {state.broker_ids[b]})"
            racks.setdefault(name, []).append(state.broker_ids[b])
        raise errors.RackAwareError.too_few([state.name(p) for p in parts], rf, racks)

    def violations(self, state: ClusterState) -> list[int]:
        rack = state.rack
        return [p for p, reps in enumerate(state.replicas) if len({rack[b] for b in reps}) < len(reps)]

    def optimize(self, state: ClusterState, accepted_by: Sequence[Goal]) -> None:
        checks, ranking = [*accepted_by, self], LoadRanking(state, REPLICAS)
        for p in self.violations(state):
            reps = state.replicas[p]
            # Keep, per rack, the replica that is eligible and earliest in the list (the leader).
            keep_order = sorted(range(len(reps)), key=lambda i: (not state.eligible(p, reps[i]), i))
            used, doomed = set(), []
            for i in keep_order:
                if state.rack[reps[i]] in used:
                    doomed.append(reps[i])
                used.add(state.rack[reps[i]])
            for source in doomed:
                self._relocate(state, ranking, p, source, checks)

    def is_action_acceptable(self, action: Action, state: ClusterState) -> bool:
        return all(state.rack_free(p, s, d) for p, s, d in state.replica_transfers(action))


class IsolationGoal(_HardGoal):
    """A topic with an isolation tag keeps its replicas on brokers carrying that tag."""

    name = "Isolation"
    error = errors.IsolationError

    def check_feasible(self, state: ClusterState) -> None:
        for t, topic in enumerate(state.topic_names):
            tag = state.isolation.get(topic)
            parts = state.topic_partitions[t]
            if tag is None or not parts:
                continue
            group = state.p_group[parts[0]]
            members = state.group_members[group]
            short = [p for p in parts if len(state.replicas[p]) > len(members)]
            if short:
                rf = max(len(state.replicas[p]) for p in short)
                raise errors.IsolationError.too_few(topic, tag, state.ids(members), rf,
                                                    [state.name(p) for p in short])

    def violations(self, state: ClusterState) -> list[int]:
        return [
            p for p, reps in enumerate(state.replicas)
            if state.p_group[p] and not all(state.eligible(p, b) for b in reps)
        ]

    def optimize(self, state: ClusterState, accepted_by: Sequence[Goal]) -> None:
        checks, ranking = [*accepted_by, self], LoadRanking(state, REPLICAS)
        for p in self.violations(state):
            for source in [b for b in state.replicas[p] if not state.eligible(p, b)]:
                self._relocate(state, ranking, p, source, checks)

    def is_action_acceptable(self, action: Action, state: ClusterState) -> bool:
        return all(state.eligible(p, d) for p, _, d in state.replica_transfers(action))

