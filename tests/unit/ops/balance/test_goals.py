"""Example tests of the balance goals and planner: the field's cases and the hard-goal errors."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from conveyor.config import parse_platform
from conveyor.errors import ConveyorError
from conveyor.ops.balance import (
    Broker, BytesInGoal, ClusterModel, ClusterState, IsolationError, IsolationGoal, LeadershipMove,
    LiveBrokersError, LiveBrokersGoal, ModelError, Partition, RackAwareError, RackAwareGoal,
    ReplicaCountGoal, ReplicaMove, plan,
)

GB = 10**9


def brokers(*ids: int, racks: str = "", tags: dict[str, set[int]] | None = None) -> list[Broker]:
    tags = tags or {}
    return [
        Broker(i, rack=racks[n] if racks else None, tags=frozenset(t for t, on in tags.items() if i in on))
        for n, i in enumerate(ids)
    ]


def final_assignment(model: ClusterModel, result) -> dict[tuple[str, int], tuple[int, ...]]:
    out = {(p.topic, p.partition): p.replicas for p in model.partitions}
    out.update(result.assignment())
    return out


def follower_quota(leaders: list[int], quota: dict[int, int]) -> list[int]:
    """One follower per partition, from ``quota`` (broker -> count), never the partition's leader."""
    followers = []
    for leader in leaders:
        pick = max((b for b in quota if b != leader and quota[b]), key=lambda b: quota[b])
        quota[pick] -= 1
        followers.append(pick)
    return followers


# -- the field's cases (docs/architecture.md, section 6) -----------------------------------------


def test_every_leader_of_a_topic_on_one_broker_is_spread_by_leadership_alone() -> None:
    # Reads hit a few brokers because one topic's leaders sat together (docs/architecture.md,
    # section 6). The demo's read cluster: 3 brokers, RF 3, so every broker holds every partition.
    parts = [Partition("clicks", n, (1, 2 + n % 2, 3 - n % 2), bytes_in=1000, bytes_out=3000, size=GB)
             for n in range(9)]
    model = ClusterModel(brokers(1, 2, 3), parts)
    result = plan(model)
    spread = Counter(reps[0] for reps in final_assignment(model, result).values())
    assert spread == {1: 3, 2: 3, 3: 3}
    assert result.bytes_to_move == 0 and not result.moves  # leadership changes copy nothing
    assert len(result.elections) == 6
    assert result.stats_before["leaders"].max_over_mean == pytest.approx(3.0)
    assert result.stats_after["leaders"].max_over_mean == pytest.approx(1.0)
    assert result.stats_after["bytes_out"].max_over_mean == pytest.approx(1.0)


def test_a_crowded_topic_is_spread_even_when_cluster_wide_leader_counts_look_balanced() -> None:
    # "clicks" has all 10 leaders on broker 1; "views" leads 10 on each other broker: 10 leaders
    # per broker everywhere, yet all reads of clicks hit broker 1.
    clicks_followers = [2 + n % 4 for n in range(10)]
    views_leaders = [2 + n % 4 for n in range(40)]
    quota = {1: 10, 2: 7, 3: 7, 4: 8, 5: 8}  # every broker ends with 20 replicas
    views_followers = follower_quota(views_leaders, quota)
    parts = [Partition("clicks", n, (1, f), size=GB) for n, f in enumerate(clicks_followers)]
    parts += [Partition("views", n, (leader, f), size=GB)
              for n, (leader, f) in enumerate(zip(views_leaders, views_followers))]
    model = ClusterModel(brokers(1, 2, 3, 4, 5), parts)
    result = plan(model)
    assert result.stats_before["leaders"].max_over_mean == 1.0
    final = final_assignment(model, result)
    clicks = Counter(final[("clicks", n)][0] for n in range(10))
    assert max(clicks.values()) <= 2  # ceil(10 / 5)
    assert result.stats_after["leaders"].max_over_mean <= 1.10
    assert result.bytes_to_move == 0


def test_a_new_broker_attracts_load_and_only_it_receives_replicas() -> None:
    parts = [Partition("events", n, (1 + n % 3, 1 + (n + 1) % 3), bytes_in=1e6, bytes_out=2e6, size=GB)
             for n in range(30)]
    model = ClusterModel(brokers(1, 2, 3), parts).add_broker(Broker(4))
    result = plan(model)
    after = {row.broker: row for row in result.after}
    assert result.stats_before["replicas"].max_over_mean == pytest.approx(20 / 15)
    assert after[4].replicas >= 13
    assert {m.destination for m in result.moves} == {4}
    for load in ("replicas", "leaders", "bytes_in", "bytes_out"):
        assert result.stats_after[load].max_over_mean <= 1.10, load
    assert result.bytes_to_move == GB * len(result.moves)


def test_replicas_of_a_dead_or_removed_broker_move_and_leadership_goes_to_a_live_follower() -> None:
    parts = [Partition("orders", n, (5, 1 + n % 4, 1 + (n + 1) % 4), size=GB) for n in range(8)]
    model = ClusterModel(brokers(1, 2, 3, 4, 5), parts).remove_broker(5)
    result = plan(model)
    assert [row.broker for row in result.before if not row.live] == [5]
    for change in result.changes:
        assert 5 not in change.replicas_after
        assert len(change.replicas_after) == 3
        assert change.preferred_leader in change.replicas_before  # not the empty new replica
    assert len(result.changes) == 8 and result.bytes_to_move == 8 * GB


def test_replicas_sharing_a_rack_are_separated_and_the_leader_stays() -> None:
    model = ClusterModel(brokers(1, 2, 3, 4, 5, 6, racks="abcabc"),
                         [Partition("t", 0, (1, 4)), Partition("t", 1, (2, 3))])
    result = plan(model, [LiveBrokersGoal(), RackAwareGoal()])
    (change,) = result.changes
    assert change.replicas_after[0] == 1
    assert change.replicas_after[1] in (2, 3, 5, 6)


def test_an_isolated_topic_leaves_untagged_brokers_and_others_may_use_tagged_ones() -> None:
    fleet = brokers(1, 2, 3, 4, 5, tags={"online": {1, 2, 3}})
    model = ClusterModel(fleet, [Partition("payments", 0, (1, 5)), Partition("logs", 0, (1, 2))],
                         isolation={"payments": "online"})
    result = plan(model, [LiveBrokersGoal(), RackAwareGoal(), IsolationGoal()])
    final = final_assignment(model, result)
    assert set(final[("payments", 0)]) <= {1, 2, 3} and final[("payments", 0)][0] == 1
    assert ("logs", 0) not in result.assignment()


def test_leadership_is_preferred_to_replica_moves() -> None:
    # Replicas are spread evenly (6 per broker); leaders are not (brokers 2 and 4 lead nothing).
    parts = [Partition("t", n, (1, 2) if n < 6 else (3, 4), bytes_in=5e5, bytes_out=5e5, size=GB)
             for n in range(12)]
    model = ClusterModel(brokers(1, 2, 3, 4), parts)
    result = plan(model)
    assert result.stats_before["leaders"].max_over_mean == 2
    assert result.stats_after["leaders"].max_over_mean == 1
    assert result.stats_after["bytes_out"].max_over_mean == pytest.approx(1)
    assert result.bytes_to_move == 0 and not result.moves
    assert len(result.elections) == 6


def test_the_smallest_partition_is_the_one_moved() -> None:
    sizes = [50 * GB, 40 * GB, 10**6, 30 * GB]
    parts = [Partition("big", n, (1,), size=size) for n, size in enumerate(sizes)]
    parts += [Partition("other", n, (2 + n % 2,), size=GB) for n in range(4)]
    result = plan(ClusterModel(brokers(1, 2, 3), parts))
    assert [(m.topic, m.partition, m.source) for m in result.moves] == [("big", 2, 1)]
    assert result.bytes_to_move == 10**6


def test_a_later_goal_keeps_what_an_earlier_goal_achieved() -> None:
    # Broker 1 holds the busiest partitions: bytes-in balance wants to move them, but not at the
    # price of replica-count balance, which ranks higher.
    parts = [Partition("hot", n, (1, 2), bytes_in=9e6, size=GB) for n in range(6)]
    parts += [Partition("cold", n, (2 + n % 3, 2 + (n + 1) % 3), bytes_in=1e3, size=GB) for n in range(18)]
    model = ClusterModel(brokers(1, 2, 3, 4), parts)
    counts_only = plan(model, [ReplicaCountGoal()])
    both = plan(model, [ReplicaCountGoal(), BytesInGoal()])
    limit = max(counts_only.stats_after["replicas"].max, 1.09 * counts_only.stats_after["replicas"].mean)
    assert both.stats_after["replicas"].max <= limit
    assert both.stats_after["bytes_in"].max < counts_only.stats_after["bytes_in"].max


# -- hard goals that cannot be met ---------------------------------------------------------------


def test_isolation_tag_on_too_few_brokers_names_the_tag_the_brokers_and_the_partitions() -> None:
    fleet = brokers(1, 2, 3, 4, tags={"money": {2, 4}})
    model = ClusterModel(fleet, [Partition("payments", n, (1, 2, 3)) for n in range(2)],
                         isolation={"payments": "money"})
    with pytest.raises(IsolationError) as caught:
        plan(model)
    err = caught.value
    assert isinstance(err, ConveyorError)
    assert err.goal == "Isolation"
    assert err.brokers == (2, 4)
    assert err.partitions == (("payments", 0), ("payments", 1))
    assert "'money'" in str(err) and "replication factor 3" in str(err)


def test_isolation_tag_that_no_broker_carries() -> None:
    model = ClusterModel(brokers(1, 2, 3), [Partition("payments", 0, (1, 2))], isolation={"payments": "gold"})
    with pytest.raises(IsolationError) as caught:
        plan(model)
    assert caught.value.brokers == () and "0 live broker(s)" in str(caught.value)


def test_fewer_racks_than_the_replication_factor_names_the_racks() -> None:
    model = ClusterModel(brokers(1, 2, 3, 4, racks="aabb"), [Partition("t", 0, (1, 3, 2))])
    with pytest.raises(RackAwareError) as caught:
        plan(model)
    err = caught.value
    assert err.goal == "RackAware" and err.partitions == (("t", 0),)
    assert err.brokers == (1, 2, 3, 4)
    assert "span only 2 rack(s)" in str(err) and "rack a: brokers [1, 2]" in str(err)


def test_more_replicas_than_live_brokers() -> None:
    model = ClusterModel(brokers(1, 2), [Partition("t", 0, (1, 2, 3))])
    with pytest.raises(LiveBrokersError) as caught:
        plan(model)
    assert caught.value.goal == "LiveBrokers" and caught.value.brokers == (1, 2)


@pytest.mark.parametrize("build", [
    lambda: Partition("t", 0, (1, 1)),
    lambda: Partition("t", 0, ()),
    lambda: Partition("t", 0, (1,), bytes_in=-1),
    lambda: ClusterModel(brokers(1, 1), []),
    lambda: ClusterModel(brokers(1), [Partition("t", 0, (1,)), Partition("t", 0, (1,))]),
])
def test_inconsistent_models_are_refused(build) -> None:
    with pytest.raises(ModelError):
        build()


# -- what each goal accepts ----------------------------------------------------------------------


def test_rack_and_isolation_and_liveness_acceptance() -> None:
    fleet = brokers(1, 2, 3, 4, racks="abab", tags={"iso": {1, 2, 3}})
    state = ClusterState(ClusterModel(fleet, [Partition("t", 0, (1, 2)), Partition("x", 0, (1, 9))],
                                      isolation={"t": "iso"}))
    i = state.index
    rack, isolation, live = RackAwareGoal(), IsolationGoal(), LiveBrokersGoal()
    assert not rack.is_action_acceptable(ReplicaMove(0, i[1], i[4]), state)  # rack b is taken by 2
    assert rack.is_action_acceptable(ReplicaMove(0, i[1], i[3]), state)
    assert rack.is_action_acceptable(LeadershipMove(0, i[1], i[2]), state)
    assert not isolation.is_action_acceptable(ReplicaMove(0, i[2], i[4]), state)  # 4 lacks the tag
    assert isolation.is_action_acceptable(ReplicaMove(0, i[2], i[3]), state)
    assert not live.is_action_acceptable(LeadershipMove(1, i[1], i[9]), state)
    assert live.is_action_acceptable(ReplicaMove(1, i[9], i[3]), state)


def test_balance_goal_refuses_to_push_a_broker_past_the_band() -> None:
    parts = [Partition("t", n, (1 + n % 4,)) for n in range(40)]  # 10 replicas per broker
    state = ClusterState(ClusterModel(brokers(1, 2, 3, 4), parts))
    goal = ReplicaCountGoal()
    goal.optimize(state, [])
    assert state.actions == 0  # balanced: nothing to do
    lower, upper = goal.band(state)
    assert (lower, upper) == (pytest.approx(9.1), pytest.approx(10.9))
    # 10 -> 11 on the destination is above the band and above the source's 10.
    assert not goal.is_action_acceptable(ReplicaMove(0, 0, 1), state)
    state.move_replica(0, 0, 1)  # now 9 and 11: moving back is welcome
    assert goal.is_action_acceptable(ReplicaMove(1, 1, 0), state)


# -- the plan's output ---------------------------------------------------------------------------


def test_reassignment_json_lists_changed_partitions_with_the_preferred_leader_first() -> None:
    parts = [Partition("a", 0, (1, 2), leader=2), Partition("a", 1, (2, 1)),
             Partition("b", 0, (3, 1), size=GB)]
    model = ClusterModel(brokers(1, 2, 3), parts).remove_broker(3)
    result = plan(model)
    doc = json.loads(result.to_reassignment_json())
    assert doc["version"] == 1
    (entry,) = doc["partitions"]
    assert entry["topic"] == "b" and entry["partition"] == 0
    assert entry["replicas"][0] == 1 and 3 not in entry["replicas"]
    assert entry["log_dirs"] == ["any", "any"]
    assert ("a", 0) in result.elections  # led by 2 now, preferred 1
    assert json.loads(result.to_election_json())["partitions"][0] == {"topic": "a", "partition": 0}


def test_model_from_the_platform_file() -> None:
    platform = parse_platform({
        "clusters": {"read": {"role": "read", "brokers": 3, "racks": ["a", "b", "c"], "tags": {"online": [1, 2]}}},
        "topics": {"payments": {"partitions": 2, "replication_factor": 2, "isolation": "online"},
                   "logs": {"partitions": 1}},
    })
    model = ClusterModel.from_platform(platform.cluster("read"), platform.topics_on("read"),
                                       [Partition("payments", 0, (1, 2))])
    assert model.brokers == (Broker(1, "a", frozenset({"online"})), Broker(2, "b", frozenset({"online"})),
                             Broker(3, "c", frozenset()))
    assert dict(model.isolation) == {"payments": "online"}
