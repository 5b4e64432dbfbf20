"""The Prometheus rules file: promtool accepts it, its alerts fire on the series that should fire
them and not on the others (promtool test rules), and it names only metrics the platform exports."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from conveyor.config import Ops
from conveyor.ops.rules import PRESENCE, rules_document
from tests.metricskit import KAFKA_EXPORTER_LABELS, NODE_EXPORTER_LABELS, exported_metric_names
from tests.rulekit import RELAXED, expect, rules, run_promtool, series, write_rules

pytestmark = pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool comes with `make setup`")


def test_promtool_accepts_the_rules(tmp_path: Path) -> None:
    checked = subprocess.run(["promtool", "check", "rules", str(write_rules(tmp_path))], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_alerts_fire_on_their_series_and_only_on_them(tmp_path: Path) -> None:
    rules = write_rules(tmp_path)
    down, up = {"cluster": "central", "node": "broker-1"}, {"cluster": "central", "node": "broker-2"}
    stopped, rewound, fine = ({"cluster": "central", "group": g} for g in ("mailer", "lake-feed", "search"))
    late, current = {"topic": "ad-events"}, {"topic": "clicks"}
    gap = {"route": "dc1-central", "topic": "ad-events"}
    tests = {
        "rule_files": [str(rules)],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                {"series": 'up{cluster="central",node="broker-1",job="kafka-central-broker-1"}', "values": "1 0 0 0 0"},
                {"series": 'up{cluster="central",node="broker-2",job="kafka-central-broker-2"}', "values": "1 1 1 1 1"},
                {"series": 'up{instance="watcher",job="conveyor-ops"}', "values": "0 0 0 0 0"},  # not a Kafka node
                {"series": 'kafka_server_replicamanager_underminisrpartitioncount{cluster="central",node="broker-1"}',
                 "values": "0 0 1 1 1"},
                {"series": 'kafka_server_replicamanager_underminisrpartitioncount{cluster="central",node="broker-2"}',
                 "values": "0 0 1 1 1"},
                {"series": 'conveyor_ops_group_status{cluster="central",group="mailer"}', "values": "0 3 3 3 3"},
                {"series": 'conveyor_ops_group_status{cluster="central",group="lake-feed"}', "values": "0 4 4 4 4"},
                {"series": 'conveyor_ops_group_status{cluster="central",group="search"}', "values": "1 1 1 1 1"},
                {"series": 'conveyor_ops_group_lag_records{cluster="central",group="search"}', "values": "10 10 10 10 10"},
                {"series": 'conveyor_replicate_gap_records_total{route="dc1-central",topic="ad-events"}',
                 "values": "0 0 7 7 7"},
            ],
            "alert_rule_test": [
                expect("KafkaBrokerDown", "4m", [({**down, "job": "kafka-central-broker-1"}, "0")]),
                expect("KafkaUnderMinIsr", "4m", [({"cluster": "central"}, "2")]),
                expect("ConsumerGroupStopped", "4m", [(stopped, "3")]),
                expect("ConsumerGroupRewound", "4m", [(rewound, "4")]),
                expect("ConsumerGroupLagRecords", "4m", []),  # 10 records behind, the limit is 1,000
                expect("KafkaOfflinePartitions", "4m", []),
                expect("ReplicationGap", "4m", [(gap, "")]),
            ],
        }, {
            "interval": "1m",
            "input_series": [
                # Complete only up to the epoch at 3 h: late; complete up to 1h 50m ago: in time.
                {"series": 'conveyor_lake_complete_until_timestamp_seconds{topic="ad-events"}', "values": "0+0x200"},
                {"series": 'conveyor_lake_complete_until_timestamp_seconds{topic="clicks"}', "values": "4200+0x200"},
            ],
            "alert_rule_test": [expect("LakeHourLate", "3h", [(late, "10800")])],
        }, {
            "interval": "1m",
            "input_series": [
                # broker-1's cleaner leaves 95% dirty for good, broker-2's cleans; broker-1 loaded slowly once.
                {"series": 'kafka_log_logcleanermanager_max_dirty_percent{cluster="central",node="broker-1"}',
                 "values": "95+0x30"},
                {"series": 'kafka_log_logcleanermanager_max_dirty_percent{cluster="central",node="broker-2"}',
                 "values": "95 40 95 40 95 40 95 40 95 40 95 40"},
                {"series": 'kafka_server_group_coordinator_metrics_partition_load_time_max{cluster="central",'
                           'node="broker-1"}', "values": "0 0 0 0 0 0 0 0 0 0 12000"},
                # ads: bytes out triple after 10 minutes, bytes in flat; clicks: both triple. The counters
                # of two brokers add up: 1 MiB/s (62914560 bytes a minute) in all, then 3 MiB/s. broker-2
                # is printed under Strimzi's exporter rules ("PerSec" dropped): its bytes count the same.
                *({"series": f'kafka_server_brokertopicmetrics_bytes{way}{"persec" if node == "broker-1" else ""}_total'
                             f'{{cluster="central",node="{node}",topic="{topic}"}}',
                   "values": "0+31457280x10 408944640+94371840x19" if tripled else "0+31457280x30"}
                  for node in ("broker-1", "broker-2")
                  for topic, way, tripled in (("ads", "out", True), ("ads", "in", False),
                                              ("clicks", "out", True), ("clicks", "in", True))),
            ],
            "alert_rule_test": [
                expect("OffsetsCompactionStalled", "10m", [({"cluster": "central", "node": "broker-1"}, "95")]),
                expect("GroupCoordinatorLoadSlow", "10m", [({"cluster": "central", "node": "broker-1"}, "12")]),
                expect("TopicReadAmplification", "20m", [({"cluster": "central", "topic": "ads"}, "")]),
            ],
        }],
    }
    assert up and fine and current  # series that must raise nothing, named for the reader
    path = tmp_path / "rules_test.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    tested = subprocess.run(["promtool", "test", "rules", str(path)], capture_output=True, text=True)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_expression_names_an_exported_metric(tmp_path: Path) -> None:
    # The host rules read node_exporter's names; the brokers' rules, the brokers' JMX exporters'.
    exported = exported_metric_names() | set(NODE_EXPORTER_LABELS) | set(KAFKA_EXPORTER_LABELS)
    for group in rules()["groups"]:
        for rule in group["rules"]:
            named = set(re.findall(r"\b(?:conveyor|node|kafka)_[a-z0-9_]+|\bup(?=\{)", rule["expr"]))
            assert named and named <= exported, (rule["alert"], named - exported)


def test_the_services_alerts_fire_on_their_series_and_only_on_them(tmp_path: Path) -> None:
    """Gateway gw1 answers slowly, refuses half of its requests for want of a cluster and writes to
    its failover cluster; gw2 refuses only bad requests (4xx). The mailer group falls behind and
    redelivers; search keeps up. The views reject half of their records as late; one route cannot
    reach its source. Values are those of promtool's evaluation (counters rising at a constant rate)."""
    gw1, gw2 = {"instance": "gw1"}, {"instance": "gw2"}
    mailer, search = {"topic": "jobs", "group": "mailer"}, {"topic": "jobs", "group": "search"}
    rt = {"instance": "rt"}
    rejected = "conveyor_gateway_requests_rejected_total"
    run_promtool(tmp_path, [{
        "interval": "1m",
        "input_series": [
            series(rejected, {**gw1, "topic": "ads", "reason": "unavailable"}, "0+5x40"),
            series(rejected, {**gw2, "topic": "ads", "reason": "contract"}, "0+5x40"),
            series("conveyor_gateway_request_seconds_count", {**gw1, "topic": "ads"}, "0+10x40"),
            series("conveyor_gateway_request_seconds_count", {**gw2, "topic": "ads"}, "0+10x40"),
            # gw1's requests all above the highest finite bucket (p99: that bucket's bound), gw2's fast.
            series("conveyor_gateway_request_seconds_bucket", {**gw1, "topic": "ads", "le": "30"}, "0+0x40"),
            series("conveyor_gateway_request_seconds_bucket", {**gw1, "topic": "ads", "le": "+Inf"}, "0+10x40"),
            series("conveyor_gateway_request_seconds_bucket", {**gw2, "topic": "ads", "le": "0.001"}, "0+10x40"),
            series("conveyor_gateway_request_seconds_bucket", {**gw2, "topic": "ads", "le": "+Inf"}, "0+10x40"),
            series("conveyor_gateway_failed_over", gw1, "0 0 1+0x40"),
            series("conveyor_gateway_failed_over", gw2, "0+0x40"),
            series("conveyor_dispatch_backlog", {**mailer, "instance": "d1"}, "0+10x40"),
            series("conveyor_dispatch_backlog", {**search, "instance": "d1"}, "100+0x40"),
            series("conveyor_dispatch_delivered_total", {**mailer, "instance": "d1"}, "0+10x40"),
            series("conveyor_dispatch_redelivered_total", {**mailer, "instance": "d1"}, "0+6x40"),
            series("conveyor_dispatch_delivered_total", {**search, "instance": "d1"}, "0+10x40"),
            series("conveyor_dispatch_redelivered_total", {**search, "instance": "d1"}, "0+0x40"),
            series("conveyor_dispatch_dead_lettered_total", {**mailer, "instance": "d1"}, "0x20 3+0x20"),
            series("conveyor_dispatch_dead_lettered_total", {**search, "instance": "d1"}, "0+0x40"),
            series("conveyor_dispatch_dead_letters_unwritable_total", {**mailer, "instance": "d1", "partition": "2"},
                    "0x20 1+0x20"),
            # Every event between 30 s and 90 s late: p99 interpolates to 89.4 s.
            series("conveyor_realtime_latency_seconds_bucket", {**rt, "le": "30"}, "0+0x40"),
            series("conveyor_realtime_latency_seconds_bucket", {**rt, "le": "90"}, "0+10x40"),
            series("conveyor_realtime_latency_seconds_bucket", {**rt, "le": "+Inf"}, "0+10x40"),
            series("conveyor_realtime_events_rejected_total", {**rt, "kind": "late", "view": "banner_ctr"}, "0+64x40"),
            series("conveyor_realtime_events_rejected_total", {**rt, "kind": "late", "view": "user_interests"},
                    "0+64x40"),
            series("conveyor_realtime_events_rejected_total", {**rt, "kind": "incomplete", "view": "user_interests"},
                    "0+0x40"),
            series("conveyor_realtime_records_total", rt, "0+256x40"),
            series("conveyor_realtime_redis_lost_total", rt, "0x20 1+0x20"),
            series("conveyor_replicate_cluster_unreachable", {"route": "dc1-central", "cluster": "dc1"}, "1+0x40"),
            series("conveyor_replicate_cluster_unreachable", {"route": "dc2-central", "cluster": "dc2"}, "0+0x40"),
        ],
        "alert_rule_test": [
            expect("GatewayUnavailable", "10m", [({**gw1, "topic": "ads"}, "25")]),
            expect("GatewayErrorRatio", "10m", [(gw1, "0.5")]),
            expect("GatewaySlow", "10m", [(gw1, "30")]),
            expect("GatewayFailedOver", "10m", [(gw1, "1")]),
            expect("DispatchBacklogGrowing", "35m", [(mailer, "350")]),
            expect("DispatchRedeliveries", "20m", [(mailer, "0.1")]),
            expect("DispatchDeadLetters", "35m", [(mailer, "3")]),
            expect("DispatchDeadLettersUnwritable", "35m", [(mailer, "1")]),
            expect("RealtimeSlow", "10m", [(rt, "89.4")]),
            expect("RealtimeRejects", "20m", [({**rt, "kind": "late"}, "0.5")]),
            expect("RealtimeRedisLost", "30m", [(rt, "")]),
            expect("ReplicationClusterUnreachable", "10m", [({"route": "dc1-central", "cluster": "dc1"}, "")]),
        ],
    }, {
        "interval": "1m",
        "input_series": [
            # rt2 wrote batches until minute 5 and none since; rt3 keeps writing.
            series("conveyor_realtime_batches_total", {"instance": "rt2", "attempt": "first"}, "0+1x5 5+0x30"),
            series("conveyor_realtime_batches_total", {"instance": "rt3", "attempt": "first"}, "0+1x35"),
        ],
        "alert_rule_test": [
            expect("RealtimeStalled", "10m", []),
            expect("RealtimeStalled", "25m", [({"instance": "rt2"}, "0")]),
        ],
    }])


def test_an_absent_component_alerts_and_a_present_one_does_not(tmp_path: Path) -> None:
    running = dict(value for part, value in PRESENCE.items() if part != "throttle")
    run_promtool(tmp_path, [{
        "interval": "1m",
        "input_series": [series(name, {"instance": component.replace(" ", "-")}, "0+0x20")
                         for component, name in running.items()],
        "alert_rule_test": [
            expect("ConveyorComponentAbsentThrottle", "3m", []),  # absent, but not yet for 5 minutes
            expect("ConveyorComponentAbsentThrottle", "10m", [({}, "")]),
            *(expect(f"ConveyorComponentAbsent{''.join(w.title() for w in c.split())}", "10m", [])
              for c in running),
        ],
    }])


def test_the_host_alerts_fire_on_their_series_and_only_on_them(tmp_path: Path) -> None:
    """broker-1's uplink sends at 118 MB/s of 125 MB/s, its loopback (no speed of its own) 900 MB/s
    of the 1 GB/s declared, its disk is busy 95 % of the time at 0.2 s per I/O, its log filesystem
    is 97 % full and the hypervisor steals half its CPU; broker-2 is fine on every count: its
    uplink's 10 MB/s are judged against the 125 MB/s it reports, not the 1.25 MB/s declared."""
    b1, b2 = {"instance": "broker-1"}, {"instance": "broker-2"}
    fs1 = {**b1, "device": "/dev/vdb", "mountpoint": "/var/lib/kafka", "fstype": "ext4"}
    fs2 = {**b2, "device": "/dev/vdb", "mountpoint": "/var/lib/kafka", "fstype": "ext4"}
    minute = 60
    run_promtool(tmp_path, [{
        "interval": "1m",
        "input_series": [
            series("node_network_transmit_bytes_total", {**b1, "device": "eth0"}, f"0+{118_000_000 * minute}x30"),
            series("node_network_receive_bytes_total", {**b1, "device": "eth0"}, f"0+{1_000_000 * minute}x30"),
            series("node_network_speed_bytes", {**b1, "device": "eth0"}, "125000000+0x30"),
            series("node_network_transmit_bytes_total", {**b1, "device": "lo"}, f"0+{900_000_000 * minute}x30"),
            series("node_network_receive_bytes_total", {**b1, "device": "lo"}, f"0+{900_000_000 * minute}x30"),
            series("node_network_transmit_bytes_total", {**b2, "device": "eth0"}, f"0+{10_000_000 * minute}x30"),
            series("node_network_receive_bytes_total", {**b2, "device": "eth0"}, f"0+{10_000_000 * minute}x30"),
            series("node_network_speed_bytes", {**b2, "device": "eth0"}, "125000000+0x30"),
            series("node_disk_io_time_seconds_total", {**b1, "device": "vdb"}, f"0+{0.95 * minute:g}x30"),
            series("node_disk_read_time_seconds_total", {**b1, "device": "vdb"}, f"0+{20 * minute}x30"),
            series("node_disk_write_time_seconds_total", {**b1, "device": "vdb"}, "0+0x30"),
            series("node_disk_reads_completed_total", {**b1, "device": "vdb"}, f"0+{100 * minute}x30"),
            series("node_disk_writes_completed_total", {**b1, "device": "vdb"}, "0+0x30"),
            series("node_disk_io_time_seconds_total", {**b2, "device": "vdb"}, f"0+{0.2 * minute:g}x30"),
            series("node_disk_read_time_seconds_total", {**b2, "device": "vdb"}, f"0+{1 * minute}x30"),
            series("node_disk_write_time_seconds_total", {**b2, "device": "vdb"}, "0+0x30"),
            series("node_disk_reads_completed_total", {**b2, "device": "vdb"}, f"0+{1000 * minute}x30"),
            series("node_disk_writes_completed_total", {**b2, "device": "vdb"}, "0+0x30"),
            series("node_filesystem_avail_bytes", fs1, "30+0x30"),
            series("node_filesystem_size_bytes", fs1, "1000+0x30"),
            series("node_filesystem_avail_bytes", fs2, "500+0x30"),
            series("node_filesystem_size_bytes", fs2, "1000+0x30"),
            series("node_cpu_seconds_total", {**b1, "cpu": "0", "mode": "steal"}, f"0+{0.5 * minute:g}x30"),
            series("node_cpu_seconds_total", {**b2, "cpu": "0", "mode": "steal"}, "0+0x30"),
        ],
        "alert_rule_test": [
            expect("HostNetworkSaturated", "4m", []),  # not yet held for 5 minutes
            expect("HostNetworkSaturated", "15m", [({**b1, "device": "eth0"}, "94.4%"), ({**b1, "device": "lo"}, "90%")]),
            expect("HostDiskBusy", "15m", [({**b1, "device": "vdb"}, "95%")]),
            expect("HostDiskSlow", "15m", [({**b1, "device": "vdb"}, "200ms")]),
            expect("HostFilesystemFilling", "15m", [(fs1, "97%")]),
            expect("HostFilesystemFull", "15m", [(fs1, "97%")]),
            expect("HostCpuSteal", "15m", [(b1, "50%")]),
        ],
    }])


def test_a_loss_pages_on_an_exact_topic_and_warns_on_one_delivered_at_least_once(tmp_path: Path) -> None:
    gaps, lost = "conveyor_replicate_gap_records_total", "conveyor_lake_lost_records_total"
    orders, logs = {"route": "r", "topic": "orders"}, {"route": "r", "topic": RELAXED}
    # A topic whose name differs only where the pattern's dot would match any character.
    lookalike = {"route": "r", "topic": "logs-app"}
    run_promtool(tmp_path, [{
        "interval": "1m",
        "input_series": [series(gaps, labels, "0 0 5 5 5") for labels in (orders, logs, lookalike)]
        + [series(lost, {"topic": t, "partition": "0"}, "0 0 5 5 5") for t in ("orders", RELAXED)],
        "alert_rule_test": [
            expect("ReplicationGap", "3m", [(orders, "5"), (lookalike, "5")]),
            expect("ReplicationGapAtLeastOnce", "3m", [(logs, "5")]),
            expect("LakeDataLost", "3m", [({"topic": "orders", "partition": "0"}, "5")]),
            expect("LakeDataLostAtLeastOnce", "3m", [({"topic": RELAXED, "partition": "0"}, "5")]),
        ],
    }])


def test_only_the_parts_platform_yaml_says_run_are_watched_for_absence() -> None:
    """The demo runs its dispatcher only for a while and no throttle: no alert waits on them."""
    alerts = {r["alert"] for g in rules_document(Ops(running=["gateway", "views", "watcher"]))["groups"]
              for r in g["rules"]}
    assert {a for a in alerts if a.startswith("ConveyorComponentAbsent")} == {
        "ConveyorComponentAbsentGateway", "ConveyorComponentAbsentRealtimeViews", "ConveyorComponentAbsentWatcher"}
