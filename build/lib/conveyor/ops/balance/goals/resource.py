"""The soft goal that balances one per-broker load within a band around its mean."""

from __future__ import annotations

import itertools
import math
from bisect import bisect_left
from collections.abc import Sequence

from conveyor.ops.balance.goals.base import MARGIN, THRESHOLD, Goal, accepts
from conveyor.ops.balance.model import (
    BYTES_OUT, DISK, LEADERS, REPLICAS, Action, ClusterState, LeadershipMove, LeadershipSwap, LoadRanking,
    ReplicaMove, ReplicaSwap,
)

#: Search limits that keep one action's cost independent of the cluster's size.
_MAX_DESTINATIONS = 16
_MAX_SOURCES = 32
_MAX_CANDIDATES = 256
_MAX_SWAPS = 8
#: Candidates in a row that found no action before a broker is given up on.
_MAX_FAILURES = 32


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

