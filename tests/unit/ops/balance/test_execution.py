"""Executing a plan, without Kafka: fingerprints, batches, the drift rule, the saved state; the
per-partition load estimate from broker counters; parsing Kafka's tools' output."""

from __future__ import annotations

import pytest

from conveyor.ops.balance import Broker, ClusterModel, Partition, plan
from conveyor.ops.balance.execution import Execution, drift, fingerprint, make_batches, new_execution
from conveyor.ops.balance.loads import BrokerLoad, PartitionLoad, broker_loads, partition_loads
from conveyor.ops.prometheus import Sample
from conveyor.kafka_tools import (ToolSettingsError, command_config, parse_assignment, parse_quotas, parse_verify,
                                  reassignment_json)

A, B, C = ("t", 0), ("t", 1), ("t", 2)


def _execution() -> Execution:
    """Three partitions of ``t`` on brokers 1 and 2, a third broker empty: the plan moves some."""
    brokers = [Broker(i, f"r{i}") for i in (1, 2, 3)]
    parts = [Partition("t", p, (1, 2), size=100 * (p + 1)) for p in range(6)]
    model = ClusterModel(brokers, parts)
    result = plan(model)
    before = {(p.topic, p.partition): p.replicas for p in parts}
    return new_execution("central", result, before, "2026-01-01T00:00:00Z", throttle=1000, max_partitions=1)


def test_fingerprint_changes_with_any_replica_list_and_its_order_but_not_with_dict_order() -> None:
    base = {A: (1, 2), B: (2, 3)}
    assert fingerprint(base) == fingerprint({B: (2, 3), A: (1, 2)})
    assert fingerprint(base) != fingerprint({A: (2, 1), B: (2, 3)})
    assert fingerprint(base) != fingerprint({A: (1, 2), B: (2, 4)})
    assert fingerprint(base) != fingerprint({A: (1, 2)})


@pytest.mark.parametrize(("sizes", "max_partitions", "max_bytes", "expected"), [
    ({A: 5, B: 1, C: 3}, 2, None, ((B, C), (A,))),           # cheapest first, two per batch
    ({A: 5, B: 1, C: 3}, 10, 4, ((B, C), (A,))),             # 1 + 3 fit in 4 bytes, 5 alone
    ({A: 50, B: 1}, 10, 4, ((B,), (A,))),                    # too big for any batch: alone
    ({A: 0, B: 0, C: 0}, 10, 1, ((A, B, C),)),               # leadership-only changes copy nothing
    ({}, 3, None, ()),
])
def test_batches(sizes, max_partitions, max_bytes, expected) -> None:
    assert make_batches(sizes, max_partitions, max_bytes) == expected


def test_drift_follows_the_progress_of_the_execution() -> None:
    execution = _execution()
    assert len(execution.batches) >= 2
    before, target = dict(execution.before), dict(execution.target)
    assert drift(execution, before) == []
    first = execution.batches[0][0]

    after_first = {**before, first: target[first]}
    assert [d.partition for d in drift(execution, after_first)] == [first]  # moved but not begun: drift
    in_flight = execution.started()
    assert drift(in_flight, after_first) == [] and drift(in_flight, before) == []
    union = tuple(dict.fromkeys(before[first] + target[first]))
    assert drift(in_flight, {**before, first: union}) == []  # Kafka lists old and new while moving
    done = in_flight.completed_batch()
    assert drift(done, after_first) == []
    assert [d.partition for d in drift(done, before)] == [first]

    other = execution.batches[-1][0]  # its batch has not begun: it must still hold its old replicas
    moved_by_someone = {**before, other: (3, 2)}
    [found] = drift(execution, moved_by_someone)
    assert (found.partition, found.actual) == (other, (3, 2)) and "expected replicas [1, 2]" in str(found)
    gone = {tp: r for tp, r in before.items() if tp != other}
    assert drift(execution, gone)[0].actual is None


def test_the_saved_state_round_trips_and_a_saved_plan_can_be_rebatched() -> None:
    execution = _execution().started().completed_batch().started()
    again = Execution.from_json(execution.to_json())
    assert again == execution
    assert (again.done, again.in_flight, again.finished) == (1, True, False)
    fresh = again.rebatched(None, 10, None)
    assert (fresh.done, fresh.in_flight, fresh.throttle, len(fresh.batches)) == (0, False, None, 1)
    assert fresh.fingerprint == execution.fingerprint


def test_broker_loads_group_prometheus_answers_by_node_and_keep_only_what_names_a_topic() -> None:
    def at(node: str, value: float | None, **labels: str) -> Sample:
        return Sample({"node": node, "cluster": "central", **labels}, value)

    rates_in = [at("b1", 30.0, topic="t"), at("b1", 999.0),  # the broker's total, no topic: not a topic's
                at("b2", 5.0, topic="u"), at("b9", 1.0, topic="t")]  # b9: not a broker of the cluster
    rates_out = [at("b1", None, topic="t")]  # NaN: the exporter could not read the MBean
    sizes = [at("b1", 1000.0, topic="t", partition="0"), at("b2", 7.0, topic="u", partition="0"),
             at("b3", 5.0, topic="t")]  # no partition: not a replica's size
    assert broker_loads({"b1": 1, "b2": 2, "b3": 3}, rates_in, rates_out, sizes) == [
        BrokerLoad("b1", 1, {"t": 30.0}, {}, {("t", 0): 1000.0}), BrokerLoad("b2", 2, {"u": 5.0}, {}, {("u", 0): 7.0})]


def test_partition_loads_split_a_topic_rate_over_the_partitions_its_broker_leads() -> None:
    leaders = {("t", 0): 1, ("t", 1): 1, ("t", 2): 2, ("u", 0): 2}
    brokers = [
        BrokerLoad("b1", 1, {"t": 20.0}, {"t": 40.0}, {("t", 0): 10}),
        BrokerLoad("b2", 2, {"t": 0.0, "u": 0.0}, {}, {("t", 0): 12}),
        # leads no partition of t (leadership moved in the window): spread over all of t
        BrokerLoad("b3", 3, {"t": 3.0}),
        BrokerLoad("b4", None, {"u": 6.0}, {}, {("u", 0): 7}),  # broker id unknown: over all of u
    ]
    loads = partition_loads(leaders, brokers)
    assert loads[("t", 0)] == PartitionLoad(10.0 + 1.0, 20.0, 12)   # half of broker 1's 20/s, a third of 3/s
    assert loads[("t", 1)] == PartitionLoad(11.0, 20.0, 0)
    assert loads[("t", 2)] == PartitionLoad(1.0, 0.0, 0)           # broker 2's t rate is none
    assert loads[("u", 0)] == PartitionLoad(6.0, 0.0, 7)


def test_kafka_tool_output_parsing() -> None:
    verify = parse_verify("Status of partition reassignment:\n"
                          "Reassignment of partition my-topic-1-0 is completed.\n"
                          "Reassignment of partition my-topic-1-1 is still in progress.\n"
                          "\nClearing broker-level throttles on brokers 1,2,3\n")
    assert verify.completed == {("my-topic-1", 0)} and verify.in_progress == {("my-topic-1", 1)}
    assert not verify.done
    quotas = parse_quotas("Quota configs for client-id 'lagger' are consumer_byte_rate=1048576.0, "
                          "producer_byte_rate=5.0\nQuota configs for client-id 'other' are request_percentage=10.0\n")
    assert quotas == {"lagger": {"consumer_byte_rate": 1048576.0, "producer_byte_rate": 5.0},
                      "other": {"request_percentage": 10.0}}
    assignment = {("t", 1): (3, 1), ("t", 0): (1, 2)}
    assert parse_assignment(reassignment_json(assignment)) == assignment


def test_security_settings_for_kafka_tools() -> None:
    assert command_config({}) == {}
    props = command_config({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                            "sasl.username": "conveyor", "sasl.password": 'p"w'})
    assert props["security.protocol"] == "SASL_SSL"
    assert props["sasl.jaas.config"] == ('org.apache.kafka.common.security.scram.ScramLoginModule required '
                                         'username="conveyor" password="p\\"w";')
    assert command_config({"bootstrap.servers": "k:9093", "ssl.ca.location": "/ca.pem"}) == {
        "ssl.truststore.type": "PEM", "ssl.truststore.location": "/ca.pem"}
    with pytest.raises(ToolSettingsError, match="enable.ssl.certificate.verification"):
        command_config({"security.protocol": "SSL", "enable.ssl.certificate.verification": "false"})
