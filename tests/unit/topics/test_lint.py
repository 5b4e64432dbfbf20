"""Durability lint: each rule from a table of topic settings on the demo's clusters (dc1 and dc2 of
one broker, central of three), and `config check --strict` failing on a warning."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from conveyor.cli import app
from conveyor.config import Platform, parse_platform
from conveyor.topics.lint import durability_findings

ROOT = Path(__file__).resolve().parents[3]


def _data(topic: dict[str, Any]) -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "platform.yaml").read_text())
    for spec in data["topics"].values():
        if spec.get("contract"):
            spec["contract"] = str(ROOT / spec["contract"])
    data["topics"]["t"] = {"partitions": 3, **topic}
    return data


def _findings(topic: dict[str, Any]) -> set[tuple[str, str]]:
    platform: Platform = parse_platform(_data(topic), root=ROOT)
    return {(f.cluster, f.rule) for f in durability_findings(platform) if f.topic == "t"}


@pytest.mark.parametrize(("topic", "expected"), [
    ({}, set()),
    ({"clusters": ["central"], "min_insync_replicas": 3}, {("central", "min-isr-equals-replicas")}),
    ({"clusters": ["central"], "min_insync_replicas": 1}, {("central", "min-isr-one")}),
    ({"clusters": ["central"], "replication_factor": 2, "min_insync_replicas": 1},
     {("central", "min-isr-one"), ("central", "read-replicas-below-3")}),
    ({"clusters": ["central"], "replication_factor": 2}, {("central", "min-isr-equals-replicas"),
                                                          ("central", "read-replicas-below-3")}),
    ({"clusters": ["dc1"]}, set()),  # one broker: nothing to lose a replica of, nothing to wait for
    ({"clusters": ["central"], "retention": "1d"}, {("central", "segment-over-retention")}),
    ({"clusters": ["central"], "retention": "1d", "config": {"segment.ms": "3600000"}}, set()),
    ({"clusters": ["central"], "retention": "1d", "cleanup_policy": "compact"}, set()),
    ({"clusters": ["central"], "config": {"unclean.leader.election.enable": "true"}},
     {("central", "unclean-election")}),
    # Delivered at least once, a topic accepts the rare loss of one broker failure: only what stops
    # writes or keeps records past their retention is left.
    ({"clusters": ["central"], "delivery": "at_least_once", "replication_factor": 2, "min_insync_replicas": 1,
      "config": {"unclean.leader.election.enable": "true"}}, set()),
    ({"clusters": ["central"], "delivery": "at_least_once", "min_insync_replicas": 3, "retention": "1d"},
     {("central", "min-isr-equals-replicas"), ("central", "segment-over-retention")}),
], ids=["defaults", "min-isr-equals-rf", "min-isr-one", "rf-2-min-isr-1", "rf-2-default-min-isr", "one-broker",
        "short-retention", "short-retention-short-segments", "compacted", "unclean", "at-least-once-risks",
        "at-least-once-still-warned"])
def test_each_rule_fires_on_its_settings_and_only_there(topic: dict[str, Any], expected: set) -> None:
    assert _findings(topic) == expected


def test_the_demo_platform_has_no_warning() -> None:
    assert durability_findings(parse_platform(_data({}), root=ROOT)) == []


def test_config_check_strict_fails_on_a_warning_and_shows_it(tmp_path: Path) -> None:
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(_data({"clusters": ["central"], "min_insync_replicas": 3})))
    runner = CliRunner()
    assert runner.invoke(app, ["config", "check", "--platform", str(path)]).exit_code == 0
    strict = runner.invoke(app, ["config", "check", "--platform", str(path), "--strict", "-o", "json"])
    assert strict.exit_code == 2, strict.output
    assert "min-isr-equals-replicas" in strict.output
