"""Topic requests without Kafka: partitions from the rate, the budgets and the caps, the records the
registry keeps of them, and the routes and grants that take requested topics."""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml

from conveyor.acls import parts
from conveyor.bus.registry_state import RegistryState, RequestRecord, request_key, request_record
from conveyor.bus.requests import (InvalidRequest, OverBudget, OverCap, RefusedBefore, TooManyRequests, TopicRequest,
                                   TopicTaken, check_asked, check_budgets, check_caps, decided, granted_topics,
                                   new_record, partitions_for, refusal_body, requested_topic)
from conveyor.config import Part, Platform, load_platform
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


NOW = datetime(2026, 11, 28, 12, 0, tzinfo=timezone.utc)
CONTRACT = json.loads((ROOT / "contracts" / "ad-events.schema.json").read_text())


def _asked(platform: Platform, name: str = "clicks", by: str = "adserver", at: datetime = NOW, **fields) -> RequestRecord:
    return new_record(_request(topic=name, contract=CONTRACT, consumers=["lake"], **fields), by, platform, at)


def _granted(folder: Path, name: str = "clicks", **fields) -> Platform:
    """The platform as a part that follows the registry sees it once ``name`` is granted."""
    platform = load_platform(folder / "platform.yaml")
    record = decided(_asked(platform, name, **fields), NOW)
    return platform.with_requested(granted_topics({name: record}))


def test_requested_topics_from_the_registry_join_the_routes_and_the_grants(folder: Path):
    platform = _granted(folder)
    spec = platform.topics["clicks"]
    assert (spec.partitions, spec.producers, spec.requested_by, spec.contract) == (9, ["adserver"], "adserver", None)
    assert platform.route_topics("dc1-central") == {"ad-events", "notifications", "clicks"}
    assert platform.copies("dc2-central", "clicks")
    # The gateway may write it on the writable clusters; the replicator copies it into central.
    assert ("TOPIC", "clicks", parts.Pattern.literal, "WRITE") in {
        (g.resource.value, g.name, g.pattern, g.operation) for g in parts.gateway(platform, "dc1")}
    assert "clicks" in {g.name for g in parts.replicator(platform, "central") if g.operation == "CREATE"}


def test_a_route_that_declines_requested_topics_does_not_copy_them(folder: Path):
    data = yaml.safe_load((folder / "platform.yaml").read_text())
    data["routes"]["dc1-central"]["requested"] = False
    (folder / "platform.yaml").write_text(yaml.safe_dump(data))
    platform = _granted(folder)
    assert not platform.copies("dc1-central", "clicks") and platform.copies("dc2-central", "clicks")


def test_only_granted_requests_are_topics():
    platform = load_platform(ROOT / "platform.yaml")
    pending = _asked(platform, "a")
    refused = decided(_asked(platform, "b"), NOW, OverBudget("full"))
    assert granted_topics({"a": pending, "b": refused, "c": decided(_asked(platform, "c"), NOW)}).keys() == {"c"}
    assert refused.refusal == {"error": "partition_budget", "message": "full", "status": 422}


def test_a_request_record_survives_the_registry_topic():
    platform = load_platform(ROOT / "platform.yaml")
    record = decided(_asked(platform), NOW)
    state = RegistryState()
    state.apply(*request_record(record))
    assert state.requests == {"clicks": record}
    state.apply(request_key("clicks"), None)
    assert state.requests == {}


def test_the_same_request_again_is_the_one_held_and_another_under_the_name_is_refused():
    platform = load_platform(ROOT / "platform.yaml")
    held = decided(_asked(platform), NOW)
    assert check_asked(platform, {"clicks": held}, _asked(platform, at=NOW + timedelta(minutes=5)), NOW) is held
    with pytest.raises(TopicTaken, match="requested by adserver"):
        check_asked(platform, {"clicks": held}, _asked(platform, retention=172_800_000), NOW)
    with pytest.raises(TopicTaken, match="declared in platform.yaml"):
        check_asked(platform, {}, _asked(platform, "notifications"), NOW)
    # A refused request may be asked again.
    refused = decided(_asked(platform), NOW, OverBudget("full"))
    assert check_asked(platform, {"clicks": refused}, _asked(platform), NOW) is None


def _settings(**caps) -> TopicRequests:
    return TopicRequests(**caps)


def test_a_service_holding_its_most_topics_is_refused_naming_the_cap():
    platform = load_platform(ROOT / "platform.yaml")
    held = [decided(_asked(platform, f"t{i}", at=NOW - timedelta(hours=2)), NOW) for i in range(3)]
    check_caps(_settings(max_topics_per_service=4), held, _asked(platform), NOW)
    with pytest.raises(OverCap) as refused:
        check_caps(_settings(max_topics_per_service=3), held, _asked(platform), NOW)
    assert refused.value.status == 422 and refused.value.details["cap"] == "max_topics_per_service"
    # Another service's topics and refused requests do not count.
    others = [decided(_asked(platform, f"o{i}", by="notifier", at=NOW - timedelta(hours=2)), NOW) for i in range(5)]
    gone = [decided(_asked(platform, f"r{i}", at=NOW - timedelta(hours=2)), NOW, OverBudget("x")) for i in range(5)]
    check_caps(_settings(max_topics_per_service=4), held + others + gone, _asked(platform), NOW)


def test_partitions_across_a_services_topics_are_capped():
    platform = load_platform(ROOT / "platform.yaml")
    held = [decided(_asked(platform, f"t{i}", at=NOW - timedelta(hours=2)), NOW) for i in range(2)]  # 9 each
    check_caps(_settings(max_partitions_per_service=27), held, _asked(platform), NOW)
    with pytest.raises(OverCap, match="holds 18 partitions of requested topics; 9 more") as refused:
        check_caps(_settings(max_partitions_per_service=26), held, _asked(platform), NOW)
    assert refused.value.details["cap"] == "max_partitions_per_service"


def test_requests_within_the_hour_are_capped_with_429():
    platform = load_platform(ROOT / "platform.yaml")
    recent = [_asked(platform, f"t{i}", at=NOW - timedelta(minutes=50)) for i in range(2)]
    old = [_asked(platform, f"o{i}", at=NOW - timedelta(minutes=61)) for i in range(5)]
    check_caps(_settings(max_requests_per_hour=3), recent + old, _asked(platform), NOW)
    with pytest.raises(TooManyRequests) as refused:
        check_caps(_settings(max_requests_per_hour=2), recent + old, _asked(platform), NOW)
    assert refused.value.status == 429 and refused.value.details["cap"] == "max_requests_per_hour"


def test_a_contract_the_platform_cannot_enforce_is_refused_before_anything_is_recorded():
    platform = load_platform(ROOT / "platform.yaml")
    no_event_id = {**CONTRACT, "required": [f for f in CONTRACT["required"] if f != "event_id"]}
    with pytest.raises(InvalidRequest, match="event_id"):
        new_record(_request(contract=no_event_id), "adserver", platform, NOW)


def test_a_refusal_recorded_is_answered_as_it_was():
    answer = RefusedBefore(refusal_body(OverBudget("cluster central is full", cluster="central")))
    assert (answer.status, answer.reason, answer.body()) == (422, "partition_budget", {
        "error": "partition_budget", "message": "cluster central is full", "cluster": "central"})


def test_the_admin_platform_connects_with_the_client_settings(folder: Path):
    platform = load_platform(folder / "platform.yaml").acting_as(Part.gateway)
    assert platform.acting_as(None).part is None


def test_a_request_may_ask_for_at_least_once_delivery_and_the_lake_then_keeps_copies(folder: Path):
    from conveyor.config import Delivery
    from conveyor.pipeline.dedup import dedup_window

    platform = _granted(folder, delivery="at_least_once")
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
