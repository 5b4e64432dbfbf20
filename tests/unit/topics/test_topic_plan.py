"""The topic planner against hand-made live states."""

from __future__ import annotations

import pytest

from conveyor.config import Cluster, ClusterRole, Topic
from conveyor.topics.plan import (BrokerInfo, Budget, ChangeKind, LiveTopic, needs_placement, place_replicas,
                                  plan_cluster, within_budget)

CENTRAL = Cluster(role=ClusterRole.read, brokers=3, racks=["r1", "r2", "r3"], tags={"ads": [1, 2]})
BROKERS = [BrokerInfo(1, "r1"), BrokerInfo(2, "r2"), BrokerInfo(3, "r3")]
EVENTS = Topic(partitions=12, retention="7d")


def live_of(topic: Topic, name: str = "ad-events", partitions: int | None = None, factor: int = 3, **configs):
    values = {**topic.kafka_configs(CENTRAL), **configs}
    return {name: LiveTopic(name, partitions or topic.partitions, factor, values)}


def test_missing_topic_is_created_with_cluster_replication():
    plan = plan_cluster("central", CENTRAL, {"ad-events": EVENTS}, {}, BROKERS)
    (change,) = plan.changes
    assert change.kind == ChangeKind.create
    assert (change.partitions, change.replication_factor) == (12, 3)
    assert change.configs["min.insync.replicas"] == "2"
    assert change.configs["retention.ms"] == "604800000"
    assert change.replica_assignment is None


def test_in_sync_topic_needs_nothing():
    plan = plan_cluster("central", CENTRAL, {"ad-events": EVENTS}, live_of(EVENTS), BROKERS)
    assert plan.in_sync


def test_config_drift_is_reported_with_old_and_new_value():
    plan = plan_cluster("central", CENTRAL, {"ad-events": EVENTS}, live_of(EVENTS, **{"retention.ms": "1000"}), BROKERS)
    (change,) = plan.changes
    assert change.kind == ChangeKind.alter_configs
    assert change.configs == {"retention.ms": "604800000"}
    assert "retention.ms 1000 -> 604800000" in change.detail


def test_more_partitions_declared_adds_partitions():
    plan = plan_cluster("central", CENTRAL, {"ad-events": EVENTS}, live_of(EVENTS, partitions=6), BROKERS)
    (change,) = plan.changes
    assert change.kind == ChangeKind.add_partitions and change.partitions == 12


def test_fewer_partitions_declared_is_refused_with_the_reason():
    plan = plan_cluster("central", CENTRAL, {"ad-events": EVENTS}, live_of(EVENTS, partitions=24), BROKERS)
    assert not plan.changes
    (refusal,) = plan.refusals
    assert "Kafka cannot shrink a topic" in refusal.reason and "24" in refusal.reason


def test_replication_factor_change_is_refused():
    plan = plan_cluster("central", CENTRAL, {"ad-events": EVENTS}, live_of(EVENTS, factor=2), BROKERS)
    (refusal,) = plan.refusals
    assert "replication factor 3" in refusal.reason


def test_undeclared_topics_are_deleted_only_with_prune_and_never_internal_ones():
    live = {**live_of(EVENTS), **live_of(EVENTS, name="old-topic"), **live_of(EVENTS, name="__consumer_offsets")}
    assert plan_cluster("central", CENTRAL, {"ad-events": EVENTS}, live, BROKERS).in_sync
    pruned = plan_cluster("central", CENTRAL, {"ad-events": EVENTS}, live, BROKERS, prune=True)
    assert [(c.topic, c.kind) for c in pruned.changes] == [("old-topic", ChangeKind.delete)]


def test_isolated_topic_is_placed_only_on_tagged_brokers():
    isolated = Topic(partitions=4, replication_factor=2, isolation="ads")
    plan = plan_cluster("central", CENTRAL, {"ads-only": isolated}, {}, BROKERS)
    (change,) = plan.changes
    assert change.replica_assignment is not None
    assert all(set(replicas) <= {1, 2} for replicas in change.replica_assignment)
    leaders = [replicas[0] for replicas in change.replica_assignment]
    assert sorted(leaders) == [1, 1, 2, 2]


def test_only_an_isolated_topic_created_or_grown_needs_the_live_brokers():
    isolated = Topic(partitions=4, replication_factor=2, isolation="ads")
    assert not needs_placement(CENTRAL, {"ad-events": EVENTS}, {})  # Kafka places it
    assert needs_placement(CENTRAL, {"ads-only": isolated}, {})
    assert needs_placement(CENTRAL, {"ads-only": isolated}, live_of(isolated, name="ads-only", partitions=2))
    assert not needs_placement(CENTRAL, {"ads-only": isolated}, live_of(isolated, name="ads-only"))


def test_isolated_topic_with_too_few_live_tagged_brokers_is_refused():
    isolated = Topic(partitions=4, replication_factor=2, isolation="ads")
    plan = plan_cluster("central", CENTRAL, {"ads-only": isolated}, {}, [BrokerInfo(1, "r1"), BrokerInfo(3, "r3")])
    (refusal,) = plan.refusals
    assert "fewer than the replication factor 2" in refusal.reason


@pytest.mark.parametrize("partitions, factor", [(12, 3), (7, 2), (3, 1)])
def test_placement_spreads_racks_and_leaders(partitions, factor):
    brokers = [BrokerInfo(i, f"r{(i - 1) % 3 + 1}") for i in range(1, 7)]
    assignment = place_replicas(0, partitions, factor, brokers)
    rack = {b.broker_id: b.rack for b in brokers}
    for replicas in assignment:
        assert len(set(replicas)) == factor
        assert len({rack[r] for r in replicas}) == factor
    leaders = [r[0] for r in assignment]
    assert max(leaders.count(b) for b in set(leaders)) - min(leaders.count(b.broker_id) for b in brokers) <= 1


def test_the_budget_counts_every_live_partition_and_what_the_plan_adds():
    small = CENTRAL.model_copy(update={"partition_budget": 30})
    live = {**live_of(EVENTS, partitions=10), "__consumer_offsets": LiveTopic("__consumer_offsets", 10, 3, {})}
    plan = within_budget(plan_cluster("central", small, {"ad-events": EVENTS}, live, BROKERS), small, live)
    assert plan.budget == Budget(held=20, after=22, limit=30) and not plan.refusals

    more = {"ad-events": EVENTS, "clicks": Topic(partitions=9)}
    over = within_budget(plan_cluster("central", small, more, live, BROKERS), small, live)
    assert over.budget == Budget(held=20, after=31, limit=30)
    (refusal,) = over.refusals
    assert "31 partitions, above its partition budget of 30" in refusal.reason


def test_a_cluster_already_over_its_budget_may_still_change_configs():
    small = CENTRAL.model_copy(update={"partition_budget": 5})
    live = live_of(EVENTS, **{"retention.ms": "1000"})
    plan = within_budget(plan_cluster("central", small, {"ad-events": EVENTS}, live, BROKERS), small, live)
    assert plan.budget == Budget(held=12, after=12, limit=5) and not plan.refusals
