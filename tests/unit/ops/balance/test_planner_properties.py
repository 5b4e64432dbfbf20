"""Properties of the balance planner over generated clusters (hypothesis)."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from conveyor.ops.balance import (
    Broker, ClusterModel, ClusterState, HardGoalError, LeadershipMove, Partition, ReplicaMove, plan,
)
from conveyor.ops.balance.goals import (
    BytesInGoal, BytesOutGoal, IsolationGoal, LeaderCountGoal, LiveBrokersGoal, RackAwareGoal, ReplicaCountGoal,
)
from conveyor.ops.balance.model import BALANCED, LeadershipSwap, ReplicaSwap

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DEAD = (97, 98, 99)


@st.composite
def clusters(draw: st.DrawFn) -> ClusterModel:
    """Small clusters of every shape: racks or none or some, tags, dead brokers, skewed loads."""
    ids = sorted(draw(st.sets(st.integers(1, 40), min_size=1, max_size=8)))
    rack_mode = draw(st.sampled_from(["none", "all", "some"]))
    n_racks = draw(st.integers(1, 4))
    racks = {
        i: None if rack_mode == "none" or (rack_mode == "some" and draw(st.booleans()))
        else f"r{draw(st.integers(0, n_racks - 1))}"
        for i in ids
    }
    tagged = draw(st.sets(st.sampled_from(ids)))
    fleet = [Broker(i, racks[i], frozenset({"iso"}) if i in tagged else frozenset()) for i in ids]
    pool = ids + list(DEAD[: draw(st.integers(0, 2))])
    partitions, isolation = [], {}
    for t in range(draw(st.integers(1, 4))):
        topic = f"t{t}"
        if draw(st.booleans()) and draw(st.booleans()):
            isolation[topic] = "iso"
        rf = draw(st.integers(1, min(3, len(pool))))
        for n in range(draw(st.integers(1, 6))):
            replicas = draw(st.permutations(pool))[:rf]
            leader = draw(st.sampled_from([None, -1, *replicas]))
            partitions.append(Partition(
                topic, n, tuple(replicas), leader=leader,
                bytes_in=draw(st.integers(0, 1000)), bytes_out=draw(st.integers(0, 3000)),
                size=draw(st.integers(0, 10**6)),
            ))
    return ClusterModel(fleet, partitions, isolation)


def satisfiable(model: ClusterModel) -> bool:
    """An independent oracle: every partition has enough eligible brokers on enough racks."""
    for p in model.partitions:
        tag = model.isolation.get(p.topic)
        eligible = [b for b in model.brokers if tag is None or tag in b.tags]
        racks = {b.rack if b.rack is not None else f"broker:{b.id}" for b in eligible}
        if len(eligible) < len(p.replicas) or len(racks) < len(p.replicas):
            return False
    return True


def final(model: ClusterModel, result) -> list[tuple[int, ...]]:
    changed = result.assignment()
    return [changed.get((p.topic, p.partition), p.replicas) for p in model.partitions]


@SETTINGS
@given(clusters())
def test_hard_goals_hold_after_planning_or_the_error_names_a_blocked_partition(model: ClusterModel) -> None:
    if not satisfiable(model):
        with pytest.raises(HardGoalError) as caught:
            plan(model)
        assert caught.value.goal in ("LiveBrokers", "RackAware", "Isolation")
        assert caught.value.partitions
        return
    result = plan(model)
    by_id = {b.id: b for b in model.brokers}
    for part, replicas in zip(model.partitions, final(model, result)):
        assert len(replicas) == len(part.replicas)  # replication factor kept
        assert len(set(replicas)) == len(replicas)  # no broker twice
        assert all(b in by_id for b in replicas)  # only live brokers
        racks = [by_id[b].rack if by_id[b].rack is not None else f"broker:{b}" for b in replicas]
        assert len(set(racks)) == len(racks)  # rack-aware
        tag = model.isolation.get(part.topic)
        assert tag is None or all(tag in by_id[b].tags for b in replicas)  # isolated


@SETTINGS
@given(clusters())
def test_the_plan_describes_its_own_outcome(model: ClusterModel) -> None:
    assume(satisfiable(model))
    result = plan(model)
    assignment = final(model, result)
    moved = 0
    for part, replicas in zip(model.partitions, assignment):
        moved += part.size * len(set(replicas) - set(part.replicas))
    assert result.bytes_to_move == moved
    assert sum(m.size for m in result.moves) == moved
    changed = {(c.topic, c.partition) for c in result.changes}
    assert changed == {(p.topic, p.partition) for p, r in zip(model.partitions, assignment) if r != p.replicas}
    elections = {(p.topic, p.partition) for p, r in zip(model.partitions, assignment) if r[0] != p.current_leader}
    assert set(result.elections) == elections
    # The "after" loads are what the new replica lists give, recomputed here from scratch.
    expected = {b.id: [0, 0, 0.0, 0.0] for b in model.brokers}
    for part, replicas in zip(model.partitions, assignment):
        for b in replicas:
            expected[b][0] += 1
            expected[b][2] += part.bytes_in
        expected[replicas[0]][1] += 1
        expected[replicas[0]][3] += part.bytes_out + part.bytes_in * (len(replicas) - 1)
    after = {row.broker: row for row in result.after if row.live}
    for b, (replicas, leaders, bytes_in, bytes_out) in expected.items():
        assert (after[b].replicas, after[b].leaders) == (replicas, leaders)
        assert after[b].bytes_in == pytest.approx(bytes_in) and after[b].bytes_out == pytest.approx(bytes_out)
    assert all(row.replicas == 0 for row in result.after if not row.live)


@SETTINGS
@given(clusters())
def test_replica_balance_never_ends_worse_than_it_started_or_than_the_band(model: ClusterModel) -> None:
    assume(satisfiable(model))
    # Start from a placement that needs no hard repair: the hard goals' own output.
    repaired = plan(model, [LiveBrokersGoal(), RackAwareGoal(), IsolationGoal()])
    model = replace(model, partitions=[replace(p, replicas=r, leader=None)
                                       for p, r in zip(model.partitions, final(model, repaired))])
    result = plan(model)
    assert dict(result.actions_per_goal)["RackAware"] == dict(result.actions_per_goal)["Isolation"] == 0
    before, after = result.stats_before["replicas"], result.stats_after["replicas"]
    assert after.max <= max(before.max, math.ceil(before.mean), 1.10 * before.mean) + 1e-9


@st.composite
def balanced_clusters(draw: st.DrawFn) -> ClusterModel:
    """Round-robin clusters with near-equal loads: every load within a few percent of its mean."""
    n = draw(st.integers(2, 9))
    rf = draw(st.integers(1, min(3, n)))
    racked = draw(st.booleans()) and n % rf == 0
    fleet = [Broker(i + 1, rack=f"r{i % rf}" if racked else None) for i in range(n)]
    partitions = []
    for t in range(draw(st.integers(1, 3))):
        for k in range(n * draw(st.integers(1, 4))):
            replicas = tuple(fleet[(k + j) % n].id for j in range(rf))
            jitter = 1 + draw(st.integers(-3, 3)) / 100
            partitions.append(Partition(f"t{t}", k, replicas, bytes_in=1000 * jitter,
                                        bytes_out=2000 * jitter, size=10**6))
    return ClusterModel(fleet, partitions)


@SETTINGS
@given(balanced_clusters())
def test_a_balanced_cluster_yields_an_empty_plan(model: ClusterModel) -> None:
    result = plan(model)
    assert result.is_empty and not result.moves and result.bytes_to_move == 0
    assert all(count == 0 for _, count in result.actions_per_goal)


@SETTINGS
@given(clusters(), st.randoms(use_true_random=False))
def test_balance_goals_accept_only_actions_that_keep_their_band(model: ClusterModel, rng: random.Random) -> None:
    """The contract that lets goals run in order: an action a goal accepts never raises its
    maximum above max(upper, current maximum) nor lowers its minimum below min(lower, minimum)."""
    assume(satisfiable(model))
    state = ClusterState(model)
    goals = [ReplicaCountGoal(), LeaderCountGoal(), BytesInGoal(), BytesOutGoal()]
    done = []
    for goal in [LiveBrokersGoal(), RackAwareGoal(), IsolationGoal(), *goals]:
        goal.optimize(state, done)
        done.append(goal)
    live = range(state.n_live)
    for _ in range(40):
        action = _random_action(state, rng)
        if action is None:
            continue
        accepted = [g for g in goals if g.is_action_acceptable(action, state)]
        bounds = {g: (g.band(state), max(state.load[g.resource][b] for b in live),
                      min(state.load[g.resource][b] for b in live)) for g in accepted}
        state.apply(action)
        for g, ((lower, upper), top, bottom) in bounds.items():
            loads = [state.load[g.resource][b] for b in live]
            assert max(loads) <= max(upper, top) + 1e-6, g
            assert min(loads) >= min(lower, bottom) - 1e-6, g


def _random_action(state: ClusterState, rng: random.Random):
    """A random well-formed action of any kind (not necessarily a good one)."""
    p = rng.randrange(state.n_partitions)
    reps = state.replicas[p]
    s, kind = reps[0], rng.choice("mlsr")
    if kind in "ls":
        if len(reps) < 2:
            return None
        d = rng.choice(reps[1:])
        if kind == "l":
            return LeadershipMove(p, s, d)
        others = [q for q in state.led[d] if s in state.replicas[q]]
        return LeadershipSwap(p, s, d, rng.choice(others)) if others else None
    s = rng.choice(reps)
    outside = [b for b in range(state.n_live) if b not in reps]
    if not outside or not state.live[s]:
        return None
    d = rng.choice(outside)
    if kind == "m":
        return ReplicaMove(p, s, d)
    others = [q for q in state.hosted[d] if s not in state.replicas[q]]
    return ReplicaSwap(p, s, d, rng.choice(others)) if others else None


@SETTINGS
@given(clusters(), st.randoms(use_true_random=False))
def test_incremental_aggregates_match_a_full_recount(model: ClusterModel, rng: random.Random) -> None:
    state = ClusterState(model)
    for _ in range(30):
        action = _random_action(state, rng)
        if action is not None:
            state.apply(action)
    recount = state.recomputed_load()
    for r in range(len(recount)):
        assert state.load[r] == pytest.approx(recount[r])
    for b in range(len(state.broker_ids)):
        assert state.hosted[b] == {p for p, reps in enumerate(state.replicas) if b in reps}
        assert state.led[b] == {p for p, reps in enumerate(state.replicas) if reps[0] == b}
    assert sum(state.topic_leaders.values()) == state.n_partitions
    for r in BALANCED:
        assert sum(state.load[r]) == pytest.approx(state.total[r])
