"""The watcher's readings of each Kafka node, from Prometheus's latest samples: its instant-query
answer parsed, the target's labels set apart from the exporter's, either exporter rule set's names
made one, and a node whose page Prometheus could not scrape (or does not scrape) told apart."""

from __future__ import annotations

import re

import pytest

from conveyor.ops.broker_readings import NOT_SCRAPED, SCRAPE_FAILED, Target, names_regex, readings_from_samples
from conveyor.ops.health import READ
from conveyor.ops.prometheus import QueryError, Sample, parse_vector

T0 = 1_700_000_000_000
TARGETS = (Target("b1", "http://127.0.0.1:1/metrics", 1, True), Target("b2", "http://127.0.0.1:2/metrics", 2, True),
           Target("c0", "http://127.0.0.1:3/metrics", None, False), Target("b3", "http://127.0.0.1:4/metrics", 3, True))


def at(node: str, name: str, value: float | None, **labels: str) -> Sample:
    return Sample({"__name__": name, "cluster": "central", "node": node, "instance": node, "job": f"kafka-{node}",
                   **labels}, value)


UP = (at("b1", "up", 1.0), at("b2", "up", 1.0), at("c0", "up", 1.0), at("b3", "up", 0.0))
SAMPLES = (
    at("b1", "kafka_server_replicamanager_underreplicatedpartitions", 2.0),
    at("b1", "kafka_server_replicamanager_isrshrinkspersec_total", 5.0),
    at("b1", "kafka_server_replicafetchermanager_maxlag", 7.0, clientid="Replica"),
    at("b1", "kafka_network_requestmetrics_totaltimems", 12.0, request="Produce", quantile="0.99"),
    at("b1", "kafka_controller_kafkacontroller_offlinepartitionscount", None),  # NaN: not reported
    # b2 is printed under Strimzi's rules: "PerSec" dropped, clientId in the MBean's case.
    at("b2", "kafka_server_replicamanager_underreplicatedpartitions", 0.0),
    at("b2", "kafka_server_replicamanager_isrshrinks_total", 3.0),
    at("b2", "kafka_server_replicafetchermanager_maxlag", 4.0, clientId="Replica"),
    at("c0", "kafka_controller_kafkacontroller_activecontrollercount", 1.0),
    # b3's page failed its latest scrape: what Prometheus still holds of it is not read.
    at("b3", "kafka_server_replicamanager_underreplicatedpartitions", 9.0),
)


def test_each_node_reads_its_own_samples_under_our_names() -> None:
    b1, b2, c0, b3 = readings_from_samples(TARGETS, T0, UP, SAMPLES)
    assert (b1.node, b1.broker_id, b1.up, b1.under_replicated, b1.isr_shrinks, b1.max_follower_lag, b1.p99_ms,
            b1.offline_partitions) == ("b1", 1, True, 2.0, 5.0, 7.0, {"Produce": 12.0}, None)
    assert (b2.up, b2.under_replicated, b2.isr_shrinks, b2.max_follower_lag) == (True, 0.0, 3.0, 4.0)
    assert c0.active_controller == 1.0 and not c0.is_broker
    assert (b3.up, b3.error, b3.under_replicated, b3.is_broker) == (False, SCRAPE_FAILED, None, True)


def test_a_node_prometheus_does_not_scrape_is_told_apart_from_one_that_failed() -> None:
    (b1, b2, c0, b3) = readings_from_samples(TARGETS, T0, UP[:1], SAMPLES)
    assert b1.up and [r.error for r in (b2, c0, b3)] == [NOT_SCRAPED] * 3


def test_the_query_selects_every_metric_read_under_both_names() -> None:
    selected = re.compile(f"^(?:{names_regex()})$")
    assert all(selected.match(name) for name in READ)
    assert selected.match("kafka_server_replicamanager_isrshrinks_total")  # Strimzi's
    assert not selected.match("kafka_log_log_size")  # a series per partition: not a reading's


def test_an_instant_answer_is_parsed_and_nan_is_no_value() -> None:
    body = {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"__name__": "up", "node": "b1"}, "value": [1700000000.5, "1"]},
        {"metric": {"__name__": "x"}, "value": [1700000000.5, "NaN"]}]}}
    assert parse_vector(body) == (Sample({"__name__": "up", "node": "b1"}, 1.0), Sample({"__name__": "x"}, None))


@pytest.mark.parametrize("body, says", [
    ({"status": "error", "errorType": "bad_data", "error": "parse error"}, "bad_data: parse error"),
    ({"status": "success", "data": {"resultType": "matrix", "result": []}}, "got 'matrix'"),
    ({"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}}]}}, "malformed"),
    ([], "not a JSON object"),
])
def test_an_answer_that_is_no_vector_says_what_it_is(body: object, says: str) -> None:
    with pytest.raises(QueryError, match=re.escape(says)):
        parse_vector(body)
