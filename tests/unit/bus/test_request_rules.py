"""Topic requests without Kafka: partitions from the rate, the budgets, requested-topics.yaml read
beside platform.yaml, and the routes and grants that take requested topics."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from conveyor.acls import parts
from conveyor.bus.requests import InvalidRequest, OverBudget, TopicRequest, check_budgets, partitions_for, requested_topic
from conveyor.config import ConfigError, Part, Topic, load_platform
from conveyor.config.requested import RequestedWatch, read_requested, requested_path, write_requested
from conveyor.config.topics import TopicRequests

ROOT = Path(__file__).resolve().parents[3]
SCHEMA = {"$schema": "https://json-schema.org/draft/2020-12/schema"}


def _request(**fields) -> TopicRequest:
    return TopicRequest.model_validate({"topic": "clicks", "contract": SCHEMA, "expected_rate": 100, **fields})


def test_a_modest_rate_gets_the_default_partitions():
    assert partitions_for(_request(expected_rate=1000), TopicRequests()) == (9, "the default 9")


def test_a_high_rate_gets_the_consumers_it_needs():
    # 10,000 events/s at 5 ms each, recovering from a 30 s stall within 60 s: 75 consumers.
    partitions, reason = partitions_for(_request(expected_rate=10_000), TopicRequests())
    assert partitions == 75 and "75.0 consumers needed" in reason


def test_a_rate_above_the_most_partitions_is_refused_with_the_figures():
    with pytest.raises(InvalidRequest, match="150 partitions is above the 100"):
        partitions_for(_request(expected_rate=20_000), TopicRequests())


@pytest.mark.parametrize("name", ["_audit", "__consumer_offsets", "a b", ""])
def test_platform_and_invalid_names_cannot_be_requested(name):
    with pytest.raises(ValueError):
        _request(topic=name)


def test_the_budget_refusal_names_the_cluster_and_its_figures():
    platform = load_platform(ROOT / "platform.yaml")
    check_budgets(platform, {"central": 199_991}, 9)
    with pytest.raises(OverBudget) as refused:
        check_budgets(platform, {"dc1": 10, "central": 199_992}, 9)
    assert refused.value.details == {"cluster": "central", "partitions": 199_992, "adding": 9, "budget": 200_000}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    shutil.copy(ROOT / "platform.yaml", tmp_path / "platform.yaml")
    shutil.copytree(ROOT / "contracts", tmp_path / "contracts")
    return tmp_path


def _granted(folder: Path, name: str = "clicks", **fields) -> Topic:
    platform = load_platform(folder / "platform.yaml")
    spec = requested_topic(_request(topic=name, consumers=["lake"], **fields), "adserver", platform)
    (folder / "contracts" / "requested").mkdir(exist_ok=True)
    shutil.copy(ROOT / "contracts" / "ad-events.schema.json", folder / spec.contract)
    write_requested(folder, {**read_requested(folder), name: spec})
    return spec


def test_requested_topics_load_beside_platform_yaml_and_join_the_routes(folder: Path):
    spec = _granted(folder)
    assert (spec.partitions, spec.producers, spec.requested_by) == (9, ["adserver"], "adserver")
    platform = load_platform(folder / "platform.yaml")
    assert platform.topics["clicks"] == spec
    assert platform.route_topics("dc1-central") == {"ad-events", "notifications", "clicks"}
    assert platform.copies("dc2-central", "clicks")
    # The gateway may write it on the writable clusters; the replicator copies it into central.
    assert ("TOPIC", "clicks", parts.Pattern.literal, "WRITE") in {
        (g.resource.value, g.name, g.pattern, g.operation) for g in parts.gateway(platform, "dc1")}
    assert "clicks" in {g.name for g in parts.replicator(platform, "central") if g.operation == "CREATE"}


def test_a_route_that_declines_requested_topics_does_not_copy_them(folder: Path):
    _granted(folder)
    data = yaml.safe_load((folder / "platform.yaml").read_text())
    data["routes"]["dc1-central"]["requested"] = False
    (folder / "platform.yaml").write_text(yaml.safe_dump(data))
    platform = load_platform(folder / "platform.yaml")
    assert not platform.copies("dc1-central", "clicks") and platform.copies("dc2-central", "clicks")


def test_a_name_both_declared_and_requested_is_a_problem_of_the_requested_file(folder: Path):
    _granted(folder, name="notifications")
    with pytest.raises(ConfigError) as err:
        load_platform(folder / "platform.yaml")
    assert err.value.source == requested_path(folder)
    assert "topics.notifications: is declared in platform.yaml as well" in str(err.value)


def test_a_requested_topic_naming_an_unknown_service_is_reported_in_its_file(folder: Path):
    _granted(folder)
    text = requested_path(folder).read_text().replace("- lake", "- nobody")
    requested_path(folder).write_text(text)
    with pytest.raises(ConfigError) as err:
        load_platform(folder / "platform.yaml")
    assert err.value.source == requested_path(folder) and "unknown service 'nobody'" in str(err.value)


def test_an_entry_without_requested_by_is_refused(folder: Path):
    requested_path(folder).write_text("topics:\n  clicks: {partitions: 3}\n")
    with pytest.raises(ConfigError, match="requested_by: is required in this file"):
        read_requested(folder)


def test_the_watch_answers_once_per_change(folder: Path):
    watch = RequestedWatch(folder)
    assert watch.changed() == {} and watch.changed() is None
    _granted(folder)
    assert set(watch.changed() or {}) == {"clicks"} and watch.changed() is None


def test_the_admin_platform_connects_with_the_client_settings(folder: Path):
    platform = load_platform(folder / "platform.yaml").acting_as(Part.gateway)
    assert platform.acting_as(None).part is None


def test_a_watch_made_after_the_file_changed_still_reads_it_first(folder: Path):
    _granted(folder)
    watch = RequestedWatch(folder)  # a service that loaded its platform before the request
    assert set(watch.changed() or {}) == {"clicks"}


def test_a_request_may_ask_for_at_least_once_delivery_and_the_lake_then_keeps_copies(folder: Path):
    from conveyor.config import Delivery
    from conveyor.pipeline.dedup import dedup_window

    _granted(folder, delivery="at_least_once")
    platform = load_platform(folder / "platform.yaml")
    assert platform.topics["clicks"].delivery is Delivery.at_least_once
    assert platform.relaxed_topics() == ["clicks"]
    assert dedup_window(platform, "clicks") == 0 and dedup_window(platform, "ad-events") == 3600


def test_a_route_copies_each_topic_as_its_delivery_asks_and_its_own_mode_covers_the_undeclared(folder: Path):
    data = yaml.safe_load((folder / "platform.yaml").read_text())
    data["routes"]["dc1-central"]["mode"] = "at-least-once"
    (folder / "platform.yaml").write_text(yaml.safe_dump(data))
    platform = load_platform(folder / "platform.yaml")
    platform = platform.with_requested({"clicks": requested_topic(_request(delivery="at_least_once"), "adserver",
                                                                  platform)})
    modes = {topic: platform.copy_mode("dc1-central", topic).value for topic in ("ad-events", "clicks", "undeclared")}
    assert modes == {"ad-events": "exactly-once", "clicks": "at-least-once", "undeclared": "at-least-once"}


def test_exact_topics_are_never_requested_into_a_logs_cluster(folder: Path):
    data = yaml.safe_load((folder / "platform.yaml").read_text())
    data["clusters"]["logs"] = {"role": "read", "brokers": 1, "purpose": "logs", "bootstrap": "127.0.0.1:1"}
    data["routes"]["dc1-logs"] = {"source": "dc1", "destination": "logs", "mode": "at-least-once"}
    (folder / "platform.yaml").write_text(yaml.safe_dump(data))
    platform = load_platform(folder / "platform.yaml")
    with pytest.raises(InvalidRequest, match="dc1-logs copy requested topics into a logs cluster"):
        requested_topic(_request(), "adserver", platform)
    assert requested_topic(_request(delivery="at_least_once"), "adserver", platform).partitions == 9
