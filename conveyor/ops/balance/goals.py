"""Balancing goals in the manner of Cruise Control's ``analyzer/goals/Goal.java``.

A goal is an object with :meth:`Goal.optimize` and :meth:`Goal.is_action_acceptable`. Goals run in
priority order; every action a goal takes must be acceptable to all the goals before it, so a later
goal never undoes what an earlier one achieved. Hard goals raise a
:class:`~conveyor.ops.balance.errors.HardGoalError` when they cannot be met; soft goals do what
they can.

A soft goal balances one load within a band around the mean (``upper = mean * 1.09`` for a 1.10
threshold): it sheds load from brokers above the band, then fills brokers below it, trying free
leadership changes before replica moves, and swaps where a move alone would break an earlier goal.
An action is only taken when it brings a broker towards the band, so a balanced cluster is left
alone. Its rule for later goals: no action may raise a broker above ``max(upper, source load)``
nor drop one below ``min(lower, destination load)``, so the goal's maximum never grows.
"""

from __future__ import annotations

import itertools
import math
from abc import ABC, abstractmethod
from bisect import bisect_left
from collections.abc import Sequence

from conveyor.ops.balance import errors
from conveyor.ops.balance.model import (
    BYTES_IN, BYTES_OUT, DISK, LEADERS, REPLICAS, Action, ClusterState, LeadershipMove, LeadershipSwap,
    LoadRanking, ReplicaMove, ReplicaSwap,
)

#: Target max/mean per load, and the share of the slack the planner aims for (Cruise Control's
#: balance margin) so that small later changes stay inside the threshold.
THRESHOLD = 1.10
MARGIN = 0.9
#: Search limits that keep one action's cost independent of the cluster's size.
_MAX_DESTINATIONS = 16
_MAX_SOURCES = 32
_MAX_CANDIDATES = 256
_MAX_SWAPS = 8
#: Candidates in a row that found no action before a broker is given up on.
_MAX_FAILURES = 32


class Goal(ABC):
    name: str = ""
    hard: bool = False

    def check_feasible(self, state: ClusterState) -> None:
        """Raise the goal's error if no placement can meet it (cheap counting, before planning)."""

    def violations(self, state: ClusterState) -> list[int]:
        """Partitions that break a hard goal now."""
        return []

    @abstractmethod
    def optimize(self, state: ClusterState, accepted_by: Sequence[Goal]) -> None:
        """Change ``state`` towards the goal with actions acceptable to every goal in ``accepted_by``."""

    @abstractmethod
    def is_action_acceptable(self, action: Action, state: ClusterState) -> bool:
        """May a lower-priority goal take ``action`` without undoing this goal's work?"""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def accepts(goals: Sequence[Goal], action: Action, state: ClusterState) -> bool:
    for goal in goals:
        if not goal.is_action_acceptable(action, state):
            return False
    return True


# -- hard goals ----------------------------------------------------------------------------------


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


# -- soft goals ----------------------------------------------------------------------------------


class ResourceGoal(Goal):
    """Balance one per-broker load within a band around its mean."""

    resource: int = REPLICAS
    #: Leadership moves and swaps (free: no bytes copied) come before replica moves.
    leadership: bool = False
    #: Replica swaps where a move would break an earlier goal (counts stay, the difference moves).
    swaps: bool = False

    def __init__(self, threshold: float = THRESHOLD, margin: float = MARGIN) -> None:
        if threshold < 1:
            raise ValueError("threshold is a max/mean ratio and must be at least 1")
        self.threshold, self.margin = threshold, margin
        self._band: tuple[float, float] | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(threshold={self.threshold})"

    def band(self, state: ClusterState) -> tuple[float, float]:
        """(lower, upper) load a broker should stay within; counts round to what is achievable."""
        mean = state.mean(self.resource)
        slack = (self.threshold - 1) * self.margin
        lower, upper = mean * (1 - slack), mean * (1 + slack)
        if self.resource in (REPLICAS, LEADERS):
            lower, upper = min(lower, math.floor(mean)), max(upper, math.ceil(mean))
        return lower, upper

    def is_action_acceptable(self, action: Action, state: ClusterState) -> bool:
        x = state.transfer(action, self.resource)
        if not x:
            return True
        s, d = action.source, action.destination
        if x < 0:
            s, d, x = d, s, -x
        lower, upper = self._band or self.band(state)
        load = state.load[self.resource]
        eps = 1e-9 * (upper + 1)
        return load[d] + x <= max(upper, load[s]) + eps and load[s] - x >= min(lower, load[d]) - eps

    def optimize(self, state: ClusterState, accepted_by: Sequence[Goal]) -> None:
        self._band = lower, upper = self.band(state)
        checks, load = list(accepted_by), state.load[self.resource]
        if self.leadership:
            pools: dict = {}
            weight = state.weight[self.resource]
            for s in self._over(state):  # heavy brokers hand leadership to followers
                for p in sorted(state.led[s], key=lambda q: -weight[q]):
                    if load[s] <= upper:
                        break
                    for d in sorted(state.replicas[p][1:], key=load.__getitem__):
                        if self._take(state, self._lead(state, p, s, d, checks, pools)) \
                                or self._relay(state, p, s, d, checks, pools):
                            break
            for d in self._under(state):  # light brokers take leadership where they follow
                followed = [p for p in state.hosted[d] if state.replicas[p][0] != d]
                for p in sorted(followed, key=lambda q: -load[state.replicas[q][0]]):
                    if load[d] >= lower:
                        break
                    self._take(state, self._lead(state, p, state.replicas[p][0], d, checks, pools))
        ranking, pools = LoadRanking(state, self.resource), {}
        for s in self._over(state):
            self._shed(state, s, checks, ranking, pools)
        cached: dict[int, list] = {}  # source -> its candidates, cheapest first
        for d in self._under(state):
            while load[d] < lower and self._take(state, self._fill(state, d, checks, ranking, pools, cached),
                                                 ranking):
                pass

    @staticmethod
    def _take(state: ClusterState, action: Action | None, ranking: LoadRanking | None = None) -> bool:
        if action is None:
            return False
        state.apply(action)
        if ranking is not None:
            ranking.refresh(action.source, action.destination)
        return True

    def _over(self, state: ClusterState) -> list[int]:
        """Brokers above the band, heaviest first."""
        load, upper = state.load[self.resource], self._band[1]
        return sorted((b for b in range(state.n_live) if load[b] > upper), key=lambda b: -load[b])

    def _under(self, state: ClusterState) -> list[int]:
        """Brokers below the band, lightest first."""
        load, lower = state.load[self.resource], self._band[0]
        return sorted((b for b in range(state.n_live) if load[b] < lower), key=load.__getitem__)

    def _room(self, state: ClusterState, s: int, d: int) -> float:
        """The most load that may go from ``s`` to ``d`` with both staying inside the band."""
        lower, upper = self._band
        load = state.load[self.resource]
        return min(upper - load[d], load[s] - lower)

    def _exchange(self, state: ClusterState, kind: type, p: int, s: int, d: int, room: float,
                  pool: list[tuple[float, int]], checks: Sequence[Goal]) -> Action | None:
        """Swap ``p`` (from ``s``) for a lighter partition of ``pool`` (on ``d``) so that the
        difference fits in ``room``; the lightest such partitions come first."""
        x = state.weight[self.resource][p]
        first = bisect_left(pool, (x - room, -1))
        for y, q in pool[first:first + _MAX_SWAPS]:
            if y >= x:
                break
            action = kind(p, s, d, q)
            if self._valid(state, action) and 0 < state.transfer(action, self.resource) <= room \
                    and accepts(checks, action, state):
                return action
        return None

    @staticmethod
    def _valid(state: ClusterState, action: Action) -> bool:
        """Does the swap still describe the cluster (pools are built once and go stale)?"""
        reps_p, reps_q = state.replicas[action.partition], state.replicas[action.other]
        s, d = action.source, action.destination
        if type(action) is LeadershipSwap:
            return reps_q[0] == d and s in reps_q
        return d not in reps_p and d in reps_q and s not in reps_q and state.eligible(action.other, s)

    def _lead(self, state: ClusterState, p: int, s: int, d: int, checks: Sequence[Goal],
              pools: dict) -> Action | None:
        """Leadership of ``p`` from ``s`` to ``d``, or swapped for a lighter one ``d`` leads."""
        x, room = state.weight[self.resource][p], self._room(state, s, d)
        if x <= 0 or room <= 0:
            return None
        if x <= room and accepts(checks, move := LeadershipMove(p, s, d), state):
            return move
        pool = pools.get((s, d))
        if pool is None:
            weight = state.weight[self.resource]
            pool = pools[(s, d)] = sorted((weight[q], q) for q in state.led[d] if s in state.replicas[q])
        return self._exchange(state, LeadershipSwap, p, s, d, room, pool, checks)

    def _relay(self, state: ClusterState, p: int, s: int, d: int, checks: Sequence[Goal],
               pools: dict) -> bool:
        """Leadership of ``p`` to ``d`` while ``s`` takes a lighter leadership from a third broker,
        for when ``s`` cannot lead fewer partitions. Two actions, each acceptable on its own;
        the first is rolled back if the second is refused."""
        lower, upper = self._band
        load, weight = state.load[self.resource], state.weight[self.resource]
        x = weight[p]
        if x <= 0 or load[d] + x > upper:
            return False
        pool = pools.get(("followed", s))
        if pool is None:
            pool = pools[("followed", s)] = sorted(
                (weight[r], r) for r in state.hosted[s] if state.replicas[r][0] != s)
        first = bisect_left(pool, (x - (load[s] - lower), -1))
        for y, r in pool[first:first + _MAX_SWAPS]:
            f = state.replicas[r][0]
            if y >= x:  # no relief left for s
                break
            if f in (s, d) or s not in state.replicas[r] or load[f] - y < lower:
                continue
            pull = LeadershipMove(r, f, s)
            if accepts(checks, pull, state):
                state.apply(pull)
                push = LeadershipMove(p, s, d)
                if accepts(checks, push, state):
                    state.apply(push)
                    return True
                state.move_leadership(r, f)
                state.actions -= 2
        return False

    def _replica(self, state: ClusterState, p: int, s: int, d: int, x: float, checks: Sequence[Goal],
                 pools: dict) -> Action | None:
        """``p``'s replica from ``s`` to ``d``, or swapped for a lighter replica on ``d``."""
        room = self._room(state, s, d)
        if room <= 0 or d in state.replicas[p] or not state.eligible(p, d):
            return None
        if x <= room and accepts(checks, move := ReplicaMove(p, s, d), state):
            return move
        if not self.swaps:
            return None
        pool = pools.get(d)
        if pool is None:  # for a load that follows leaders, swap leader replicas only
            weight, bound = state.weight[self.resource], self.resource in (LEADERS, BYTES_OUT)
            pool = pools[d] = sorted((weight[q], q) for q in (state.led[d] if bound else state.hosted[d]))
        return self._exchange(state, ReplicaSwap, p, s, d, room, pool, checks)

    def _candidates(self, state: ClusterState, s: int) -> list[tuple[tuple[bool, float], int, float]]:
        """Replicas on ``s`` that carry the load, cheapest first: bytes copied per unit of load,
        followers before leaders when the load does not follow leadership."""
        weight, size, reps = state.weight[self.resource], state.weight[DISK], state.replicas
        # A fixed cost per move keeps near-idle partitions from being moved one by one.
        overhead = 0.25 * state.total[DISK] / max(state.total[REPLICAS], 1)
        leader_bound = self.resource in (LEADERS, BYTES_OUT)
        out = []
        for p in state.hosted[s]:
            leads = reps[p][0] == s
            x = weight[p] if leads or not leader_bound else 0
            if x > 0:
                out.append(((leads and not leader_bound, (size[p] + overhead) / x), p, x))
        out.sort()
        return out

    def _shed(self, state: ClusterState, s: int, checks: Sequence[Goal], ranking: LoadRanking,
              pools: dict) -> None:
        """Move replicas off ``s``, each to the lightest broker that may take it."""
        lower, upper = self._band
        load, failures = state.load[self.resource], 0
        for _, p, x in self._candidates(state, s):
            if load[s] <= upper or failures >= _MAX_FAILURES:
                return
            if load[s] - x < lower and not self.swaps:
                continue
            action = None
            for tries, (load_d, d) in enumerate(ranking.keys[state.p_group[p]]):
                if tries >= _MAX_DESTINATIONS or load_d >= upper or (load_d + x > upper and not self.swaps):
                    break
                if (action := self._replica(state, p, s, d, x, checks, pools)) is not None:
                    break
            failures = 0 if self._take(state, action, ranking) else failures + 1

    def _fill(self, state: ClusterState, d: int, checks: Sequence[Goal], ranking: LoadRanking,
              pools: dict, cached: dict[int, list]) -> Action | None:
        """An action bringing load to ``d`` from the heaviest brokers."""
        for n_sources, (load_s, s) in enumerate(reversed(ranking.keys[0])):
            if load_s <= self._band[0] or n_sources >= _MAX_SOURCES:
                return None
            if s not in cached:
                cached[s] = self._candidates(state, s)
            candidates = cached[s]
            hosted, stale = state.hosted[s], 0
            while stale < len(candidates) and candidates[stale][1] not in hosted:
                stale += 1
            del candidates[:stale]
            for _, p, x in itertools.islice(candidates, _MAX_CANDIDATES):
                if p in hosted and (action := self._replica(state, p, s, d, x, checks, pools)):
                    return action
        return None


class ReplicaCountGoal(ResourceGoal):
    name, resource = "ReplicaCountBalance", REPLICAS


class LeaderCountGoal(ResourceGoal):
    """Leaders balanced per broker, and each topic's leaders spread over the brokers holding it.

    The per-topic spread is the mission's case (reads hitting 2-3 of 5 brokers): a topic whose
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
