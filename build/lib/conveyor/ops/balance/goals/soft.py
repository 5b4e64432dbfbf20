"""The soft goals, in priority order: replica counts, leader counts (with each topic's leaders
spread), bytes in, bytes out."""

from __future__ import annotations

import math
from collections.abc import Sequence

from conveyor.ops.balance.goals.base import MARGIN, THRESHOLD, Goal, accepts
from conveyor.ops.balance.goals.resource import ResourceGoal
from conveyor.ops.balance.model import (
    BYTES_IN, BYTES_OUT, LEADERS, REPLICAS, Action, ClusterState, LeadershipMove, LeadershipSwap,
)


class ReplicaCountGoal(ResourceGoal):
    name, resource = "ReplicaCountBalance", REPLICAS


class LeaderCountGoal(ResourceGoal):
    """Leaders balanced per broker, and each topic's leaders spread over the brokers holding it.

    The per-topic spread is the field's case (reads hitting 2-3 of 5 brokers, docs/architecture.md,
    section 6): a topic whose
    leaders crowd one broker is spread even when the cluster-wide counts already look balanced,
    by a leadership move or, when that would unbalance the counts, a leadership swap with a
    partition of another topic. A topic's cap is ceil(partitions / brokers holding the topic).
    """

    name, resource, leadership = "LeaderCountBalance", LEADERS, True

    def __init__(self, threshold: float = THRESHOLD, margin: float = MARGIN) -> None:
        super().__init__(threshold, margin)
        self._caps: list[int] | None = None

    @staticmethod
    def topic_caps(state: ClusterState) -> list[int]:
        caps = []
        for parts in state.topic_partitions:
            hosts = {b for p in parts for b in state.replicas[p]}
            caps.append(math.ceil(len(parts) / max(len(hosts), 1)))
        return caps

    def _fits(self, state: ClusterState, topic: int, s: int, d: int) -> bool:
        """May ``d`` lead one more partition of ``topic``, taken from ``s``?"""
        count = state.topic_leader_count
        return count(topic, d) + 1 <= max(self._caps[topic], count(topic, s))

    def is_action_acceptable(self, action: Action, state: ClusterState) -> bool:
        if not super().is_action_acceptable(action, state):
            return False
        if self._caps is None:
            return True
        moves = state.leader_transfers(action)
        if len(moves) == 2 and state.p_topic[moves[0][0]] == state.p_topic[moves[1][0]]:
            return True  # one leadership of the topic each way
        return all(self._fits(state, state.p_topic[p], s, d) for p, s, d in moves)

    def optimize(self, state: ClusterState, accepted_by: Sequence[Goal]) -> None:
        self._caps = None
        super().optimize(state, accepted_by)
        self._caps = caps = self.topic_caps(state)
        checks, count, n = [*accepted_by, self], state.topic_leader_count, len(state.broker_ids)
        for t, s in [divmod(key, n) for key, c in sorted(state.topic_leaders.items()) if c > caps[key // n]]:
            for p in state.topic_partitions[t]:
                if count(t, s) <= caps[t]:
                    break
                if state.replicas[p][0] != s:
                    continue
                for d in sorted(state.replicas[p][1:], key=lambda b: (count(t, b), state.load[LEADERS][b])):
                    if count(t, d) >= caps[t]:
                        break
                    action = self._spread(state, p, s, d, checks)
                    if action is not None:
                        state.apply(action)
                        break

    @staticmethod
    def _spread(state: ClusterState, p: int, s: int, d: int, checks: Sequence[Goal]) -> Action | None:
        """Leadership of ``p`` to ``d``, alone or swapped for a partition of another topic."""
        move = LeadershipMove(p, s, d)
        if accepts(checks, move, state):
            return move
        for q in state.led[d]:
            if state.p_topic[q] != state.p_topic[p] and s in state.replicas[q]:
                swap = LeadershipSwap(p, s, d, q)
                if accepts(checks, swap, state):
                    return swap
        return None


class BytesInGoal(ResourceGoal):
    name, resource, swaps = "BytesInBalance", BYTES_IN, True


class BytesOutGoal(ResourceGoal):
    name, resource, leadership, swaps = "BytesOutBalance", BYTES_OUT, True, True
