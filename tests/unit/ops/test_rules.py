"""The Prometheus rules file: promtool accepts it, its alerts fire on the series that should fire
them and not on the others (promtool test rules), and it names only metrics the platform exports."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from conveyor.config import Ops
from conveyor.ops.rules import rules_document
from tests.metricskit import exported_metric_names

pytestmark = pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool comes with `make setup`")


def _rules() -> dict[str, Any]:
    return rules_document(Ops(max_lag_records=1000))


def _write_rules(folder: Path) -> Path:
    path = folder / "rules.yml"
    path.write_text(yaml.safe_dump(_rules(), sort_keys=False))
    return path


def _annotations(alert: str, labels: dict[str, str], value: str) -> dict[str, str]:
    """The rule's annotations as Prometheus renders them for one series."""
    rule = next(r for g in _rules()["groups"] for r in g["rules"] if r["alert"] == alert)
    render = {key: re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], text).replace("{{ $value }}", value)
              for key, text in rule["annotations"].items()}
    return render


def _expect(alert: str, eval_time: str, firing: list[tuple[dict[str, str], str]]) -> dict[str, Any]:
    rule = next(r for g in _rules()["groups"] for r in g["rules"] if r["alert"] == alert)
    return {"eval_time": eval_time, "alertname": alert,
            "exp_alerts": [{"exp_labels": {**labels, **rule["labels"]}, "exp_annotations": _annotations(alert, labels, value)}
                           for labels, value in firing]}


def test_promtool_accepts_the_rules(tmp_path: Path) -> None:
    checked = subprocess.run(["promtool", "check", "rules", str(_write_rules(tmp_path))], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_alerts_fire_on_their_series_and_only_on_them(tmp_path: Path) -> None:
    rules = _write_rules(tmp_path)
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
                {"series": 'conveyor_ops_broker_up{cluster="central",node="broker-1"}', "values": "1 0 0 0 0"},
                {"series": 'conveyor_ops_broker_up{cluster="central",node="broker-2"}', "values": "1 1 1 1 1"},
                {"series": 'conveyor_ops_cluster_under_min_isr_partitions{cluster="central"}', "values": "0 0 2 2 2"},
                {"series": 'conveyor_ops_group_status{cluster="central",group="mailer"}', "values": "0 3 3 3 3"},
                {"series": 'conveyor_ops_group_status{cluster="central",group="lake-feed"}', "values": "0 4 4 4 4"},
                {"series": 'conveyor_ops_group_status{cluster="central",group="search"}', "values": "1 1 1 1 1"},
                {"series": 'conveyor_ops_group_lag_records{cluster="central",group="search"}', "values": "10 10 10 10 10"},
                {"series": 'conveyor_replicate_gap_records_total{route="dc1-central",topic="ad-events"}',
                 "values": "0 0 7 7 7"},
            ],
            "alert_rule_test": [
                _expect("KafkaBrokerDown", "4m", [(down, "0")]),
                _expect("KafkaUnderMinIsr", "4m", [({"cluster": "central"}, "2")]),
                _expect("ConsumerGroupStopped", "4m", [(stopped, "3")]),
                _expect("ConsumerGroupRewound", "4m", [(rewound, "4")]),
                _expect("ConsumerGroupLagRecords", "4m", []),  # 10 records behind, the limit is 1,000
                _expect("KafkaOfflinePartitions", "4m", []),
                _expect("ReplicationGap", "4m", [(gap, "")]),
            ],
        }, {
            "interval": "1m",
            "input_series": [
                # Complete only up to the epoch at 3 h: late; complete up to 1h 50m ago: in time.
                {"series": 'conveyor_lake_complete_until_timestamp_seconds{topic="ad-events"}', "values": "0+0x200"},
                {"series": 'conveyor_lake_complete_until_timestamp_seconds{topic="clicks"}', "values": "4200+0x200"},
            ],
            "alert_rule_test": [_expect("LakeHourLate", "3h", [(late, "10800")])],
        }, {
            "interval": "1m",
            "input_series": [
                # broker-1's cleaner leaves 95% dirty for good, broker-2's cleans; broker-1 loaded slowly once.
                {"series": 'conveyor_ops_broker_cleaner_max_dirty_percent{cluster="central",node="broker-1"}',
                 "values": "95+0x30"},
                {"series": 'conveyor_ops_broker_cleaner_max_dirty_percent{cluster="central",node="broker-2"}',
                 "values": "95 40 95 40 95 40 95 40 95 40 95 40"},
                {"series": 'conveyor_ops_broker_coordinator_load_seconds{cluster="central",node="broker-1"}',
                 "values": "0 0 0 0 0 0 0 0 0 0 12"},
                # ads: bytes out triple after 10 minutes, bytes in flat; clicks: both triple.
                {"series": 'conveyor_ops_topic_bytes_out_per_second{cluster="central",topic="ads"}',
                 "values": "1048576+0x10 3145728+0x20"},
                {"series": 'conveyor_ops_topic_bytes_in_per_second{cluster="central",topic="ads"}',
                 "values": "1048576+0x30"},
                {"series": 'conveyor_ops_topic_bytes_out_per_second{cluster="central",topic="clicks"}',
                 "values": "1048576+0x10 3145728+0x20"},
                {"series": 'conveyor_ops_topic_bytes_in_per_second{cluster="central",topic="clicks"}',
                 "values": "1048576+0x10 3145728+0x20"},
            ],
            "alert_rule_test": [
                _expect("OffsetsCompactionStalled", "10m", [({"cluster": "central", "node": "broker-1"}, "95")]),
                _expect("GroupCoordinatorLoadSlow", "10m", [({"cluster": "central", "node": "broker-1"}, "12")]),
                _expect("TopicReadAmplification", "20m", [({"cluster": "central", "topic": "ads"}, "")]),
            ],
        }],
    }
    assert up and fine and current  # series that must raise nothing, named for the reader
    path = tmp_path / "rules_test.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    tested = subprocess.run(["promtool", "test", "rules", str(path)], capture_output=True, text=True)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_expression_names_an_exported_metric() -> None:
    exported = exported_metric_names()
    for group in _rules()["groups"]:
        for rule in group["rules"]:
            named = set(re.findall(r"\bconveyor_[a-z0-9_]+", rule["expr"]))
            assert named and named <= exported, (rule["alert"], named - exported)
