"""The rules over what the watcher judges (lag windows, offsets moved or lost, a cluster it cannot
sample) and over the brokers' own figures it passes on: each fires on its series and stays quiet
on the others, in Prometheus's own rule engine (promtool test rules)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conveyor.config import Ops
from conveyor.ops.lag import Status
from conveyor.ops.rules import OFFSET_MOVES, rules_document
from tests.rulekit import expect, run_promtool, series

pytestmark = pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool comes with `make setup`")

CENTRAL = {"cluster": "central"}


def group(name: str) -> dict[str, str]:
    return {**CENTRAL, "group": name}


def node(name: str) -> dict[str, str]:
    return {**CENTRAL, "node": name}


def test_lag_statuses_and_offset_moves_each_raise_one_alert(tmp_path: Path) -> None:
    """Each group is in one state for 5 minutes. A group whose offsets moved back gets the move's
    alert and not ConsumerGroupRewound as well; one whose commit was lost gets
    ConsumerGroupOffsetsLost and not ConsumerGroupError as well."""
    status = "conveyor_ops_group_status"
    lost = "conveyor_ops_group_lost_commit_partitions"
    moves = "conveyor_ops_offset_moves"
    steady = "{0}+0x5"
    run_promtool(tmp_path, [{
        "interval": "1m",
        "input_series": [
            series(status, group("lagging"), steady.format(int(Status.WARN))),
            series(status, group("fine"), steady.format(int(Status.OK))),
            series(lost, group("fine"), "0+0x5"),
            # ERR for two reasons: a commit the offset manager lost, a commit outside the log.
            series(status, group("forgotten"), steady.format(int(Status.ERR))),
            series(lost, group("forgotten"), "3+0x5"),
            series(status, group("beyond"), steady.format(int(Status.ERR))),
            series(lost, group("beyond"), "0+0x5"),
            # REWIND with the move's kind and amount, and REWIND seen without one.
            series(status, group("replayed"), steady.format(int(Status.REWIND))),
            *(series(moves, {**group("replayed"), "kind": kind}, "2+0x5") for kind in OFFSET_MOVES),
            series(status, group("moved-back"), steady.format(int(Status.REWIND))),
            series("conveyor_ops_cluster_sampled", CENTRAL, "1 1 0 0 0 0"),
        ],
        "alert_rule_test": [
            expect("ConsumerGroupLagging", "4m", [(group("lagging"), "1")]),
            expect("ConsumerGroupOffsetsLost", "4m", [(group("forgotten"), "3")]),
            expect("ConsumerGroupError", "4m", [(group("beyond"), "5")]),
            *(expect(name, "4m", [({**group("replayed"), "kind": kind}, "2")])
              for kind, (name, *_rest) in OFFSET_MOVES.items()),
            expect("ConsumerGroupRewound", "4m", [(group("moved-back"), "4")]),
            expect("ClusterNotSampled", "1m", []),
            expect("ClusterNotSampled", "4m", [(CENTRAL, "0")]),
        ],
    }])


def test_the_brokers_figures_raise_their_alerts(tmp_path: Path) -> None:
    """broker-1 shrinks its ISR once, its followers stay behind, and its controller saw an
    unclean election; broker-2's followers catch up between samples. The cluster lost its active
    controller and saw leaders move. broker-2 is printed under Strimzi's exporter rules, whose
    meters drop "PerSec" and whose labels keep the MBean's case (clientId)."""
    window = Ops().window * Ops().interval  # the follower-lag rule's span: 50 s by default
    assert window < 60
    run_promtool(tmp_path, [{
        "interval": "1m",
        "input_series": [
            series("kafka_server_replicamanager_isrshrinkspersec_total", node("broker-1"), "0 0 0 4 4 4 4 4 4 4 4 4"),
            series("kafka_server_replicamanager_isrshrinks_total", node("broker-2"), "0+0x11"),
            series("kafka_controller_controllerstats_uncleanleaderelectionspersec_total", node("broker-1"),
                   "0 0 1 1 1 1"),
            series("kafka_controller_controllerstats_uncleanleaderelections_total", node("broker-2"), "0+0x5"),
            series("kafka_controller_kafkacontroller_activecontrollercount", node("broker-1"), "1 1 0 0 0 0"),
            series("kafka_controller_kafkacontroller_activecontrollercount", node("broker-2"), "0 0 0 0 0 0"),
            series("conveyor_ops_cluster_leader_moves_total", CENTRAL, "0 0 0 6 6 6 6 6 6 6 6 6"),
        ],
        "alert_rule_test": [
            expect("KafkaIsrShrinking", "2m", []),
            expect("KafkaIsrShrinking", "4m", [(node("broker-1"), "")]),
            expect("KafkaIsrShrinking", "11m", []),  # the shrink left the 5-minute window
            expect("KafkaUncleanLeaderElection", "4m", [(CENTRAL, "1")]),
            expect("KafkaNoActiveController", "1m", []),
            expect("KafkaNoActiveController", "4m", [(CENTRAL, "0")]),
            expect("KafkaLeaderChanges", "4m", [(CENTRAL, "")]),
            expect("KafkaLeaderChanges", "9m", []),  # the change left the 5 minutes
        ],
    }, {
        # Scraped every 10 s: broker-1's followers stay behind across the whole window, broker-2's
        # catch up between samples.
        "interval": "10s",
        "input_series": [
            series("kafka_server_replicafetchermanager_maxlag", {**node("broker-1"), "clientid": "Replica"},
                   "0 0 10+0x11"),
            series("kafka_server_replicafetchermanager_maxlag", {**node("broker-2"), "clientId": "Replica"},
                   "0 5 0 7 0 3 0 6 0 4 0 5 0"),
        ],
        "alert_rule_test": [
            expect("KafkaFollowerLagging", "1m", []),  # behind, but not yet for the whole window
            expect("KafkaFollowerLagging", "2m", [(node("broker-1"), "10")]),
        ],
    }])


def test_skew_alerts_only_where_the_load_is_large_enough_to_matter(tmp_path: Path) -> None:
    """In both clusters b1 carries four times what b2 does, in leaders and in bytes in, for 40
    minutes (max over mean 1.6); only "busy" carries enough of either (ops.skew_min_bytes per second, three leaders per broker) to be told.
    Replicas are even. b2 prints its meters under Strimzi's names."""
    blocks = []
    for cluster, leaders, bytes_per_minute in (("busy", 12, 600 * 1048576), ("idle", 1, 600)):
        labels = {"cluster": cluster}
        for broker, share in (("b1", 4), ("b2", 1)):
            at = {**labels, "node": broker}
            meter = "bytesinpersec" if broker == "b1" else "bytesin"
            blocks += [series("kafka_server_replicamanager_leadercount", at, f"{leaders * share}+0x40"),
                       series("kafka_server_replicamanager_partitioncount", at, "40+0x40"),
                       series(f"kafka_server_brokertopicmetrics_{meter}_total", at,
                              f"0+{bytes_per_minute * share}x40"),
                       # A topic's own counter is not the broker's load.
                       series(f"kafka_server_brokertopicmetrics_{meter}_total", {**at, "topic": "t"},
                              f"0+{bytes_per_minute * 10}x40")]
    run_promtool(tmp_path, [{
        "interval": "1m",
        "input_series": blocks,
        "alert_rule_test": [
            expect("KafkaLoadSkew", "20m", []),  # not yet for 30 minutes
            expect("KafkaLoadSkew", "38m", [({"cluster": "busy", "load": "leaders"}, "1.60"),
                                           ({"cluster": "busy", "load": "bytes_in"}, "1.60")]),
        ],
    }])


def test_every_alert_the_watcher_once_raised_itself_has_its_rule() -> None:
    """The watcher's own alert names before its alerts moved into Prometheus, and the rule of each."""
    took_over = {
        "lag_warn": "ConsumerGroupLagging", "lag_stall": "ConsumerGroupStalled", "lag_stop": "ConsumerGroupStopped",
        "lag_rewind": "ConsumerGroupRewound", "lag_err": "ConsumerGroupError",
        "offset_fetch_empty": "ConsumerGroupOffsetsLost", "offset_rewind": "ConsumerOffsetsRewound",
        "offset_reset_earliest": "ConsumerOffsetsResetEarliest", "offset_reset_latest": "ConsumerOffsetsResetLatest",
        "offset_behind_log_start": "ConsumerBehindLogStart", "read_amplification": "ReadAmplification",
        "broker_down": "KafkaBrokerDown", "under_replicated": "KafkaUnderReplicatedPartitions",
        "under_min_isr": "KafkaUnderMinIsr", "offline_partitions": "KafkaOfflinePartitions",
        "no_active_controller": "KafkaNoActiveController", "isr_shrinking": "KafkaIsrShrinking",
        "unclean_leader_election": "KafkaUncleanLeaderElection", "leader_changes": "KafkaLeaderChanges",
        "request_slow": "KafkaRequestSlow", "follower_lag": "KafkaFollowerLagging", "load_skew": "KafkaLoadSkew",
        "offsets_compaction_stalled": "OffsetsCompactionStalled", "log_cleaner_idle": "LogCleanerIdle",
        "coordinator_load_slow": "GroupCoordinatorLoadSlow", "topic_read_amplification": "TopicReadAmplification",
        "sampling_failed": "ClusterNotSampled", "replication_gap": "ReplicationGap",
    }
    names = {r["alert"] for g in rules_document(Ops())["groups"] for r in g["rules"]}
    assert set(took_over.values()) <= names, set(took_over.values()) - names
