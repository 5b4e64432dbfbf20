"""The gateway against real brokers: every status with its body, all-or-nothing batches, ACLs,
events in Kafka keyed by the contract, and audit counts equal to the accepted events."""

from __future__ import annotations

import copy
from collections import defaultdict
from pathlib import Path

import httpx
import orjson
import pytest
from confluent_kafka import TopicPartition

from conveyor import kafka
from conveyor.config import Platform, parse_platform
from conveyor.config.resolved import resolved
from tests.conftest import demo_event, read_topic

pytestmark = pytest.mark.integration
ADSERVER = {"Authorization": "Bearer demo-adserver-token"}


@pytest.fixture(scope="module")
def gw_platform(provisioned: Platform, platform_data, platform_file: Path) -> Platform:
    data = copy.deepcopy(platform_data)
    data["gateway"] = {**data.get("gateway", {}), "max_request_bytes": "64KiB", "max_event_bytes": "4KiB"}
    return resolved(parse_platform(data, root=platform_file.parent))


@pytest.fixture
def url(gw_platform: Platform, serve_gateway) -> str:
    return serve_gateway(gw_platform, "dc1")


def post(url: str, topic: str, body, headers=ADSERVER, content_type="application/json") -> httpx.Response:
    content = body if isinstance(body, bytes) else orjson.dumps(body)
    return httpx.post(f"{url}/v1/topics/{topic}/events", content=content,
                      headers={**(headers or {}), "Content-Type": content_type}, timeout=60)


def end_offsets(platform: Platform, cluster: str, topic: str) -> dict[int, int]:
    consumer = kafka.consumer(platform, cluster, "offsets-peek", "offsets-peek")
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions}
    finally:
        consumer.close()


def test_accepted_event_answers_with_partition_and_offset(url, gw_platform):
    event = demo_event()
    answer = post(url, "ad-events", event)
    assert answer.status_code == 200, answer.text
    (placed,) = answer.json()["events"]
    assert placed["cluster"] == "dc1"
    landed = read_topic(gw_platform, "dc1", "ad-events")
    match = [m for m in landed if m.partition() == placed["partition"] and m.offset() == placed["offset"]]
    assert orjson.loads(match[0].value()) == event and match[0].key() == b"user-1"


@pytest.mark.parametrize("topic, body, headers, content_type, status, error, fields", [
    ("ad-events", b"{oops", ADSERVER, "application/json", 400, "malformed", {}),
    ("ad-events", None, None, "application/json", 401, "unauthenticated", {}),
    ("ad-events", None, {"Authorization": "Bearer stolen"}, "application/json", 401, "unauthenticated", {}),
    ("ad-events", None, {"Authorization": "Bearer demo-notifier-token"}, "application/json", 403, "forbidden",
     {"service": "notifier", "topic": "ad-events"}),
    ("no-such-topic", None, ADSERVER, "application/json", 404, "unknown_topic", {"topic": "no-such-topic"}),
    ("ad-events", b"[" + b",".join([orjson.dumps(demo_event())] * 600) + b"]", ADSERVER, "application/json", 413,
     "too_large", {}),
    ("ad-events", b"[" + orjson.dumps(demo_event()) + b"," + orjson.dumps(demo_event(site_id="")) + b"]", ADSERVER,
     "application/json", 422, "contract", {"index": 1, "field": "site_id", "rule": "minLength"}),
], ids=["400-malformed", "401-missing", "401-bad-token", "403-not-producer", "404-unknown-topic", "413-request",
        "422-contract"])
def test_each_refusal_has_its_status_and_body(url, gw_platform, topic, body, headers, content_type, status, error,
                                              fields):
    answer = post(url, topic, body if body is not None else demo_event(), headers, content_type)
    assert answer.status_code == status, answer.text
    payload = answer.json()
    assert payload["error"] == error and payload["message"]
    assert fields.items() <= payload.items()
    metrics = httpx.get(f"{url}/metrics").text
    assert f'reason="{error}"' in metrics
    # Starting to write to the local cluster is not a failover.
    assert 'conveyor_gateway_failovers_total{from_cluster="dc1",to_cluster="dc1"}' not in metrics
    assert 'conveyor_gateway_active_cluster{cluster="dc1"} 1.0' in metrics


def test_the_openapi_document_has_each_topics_contract_and_every_refusal(url, gw_platform):
    document = httpx.get(f"{url}/openapi.json").json()
    assert "/v1/topics/{topic}/events" not in document["paths"]
    publish = document["paths"]["/v1/topics/ad-events/events"]["post"]
    body = publish["requestBody"]["content"]["application/json"]["schema"]["oneOf"][0]
    contract = document["components"]["schemas"][body["$ref"].rsplit("/", 1)[1]]
    assert {"event_id", "event_time", "site_id"} <= set(contract["required"])
    assert {"200", "400", "401", "403", "404", "413", "415", "422", "503"} <= set(publish["responses"])
    reasons = document["components"]["schemas"]["Refusal"]["properties"]["error"]["enum"]
    assert {"contract", "unauthenticated", "forbidden", "too_large", "overloaded", "unavailable"} <= set(reasons)
    # Every local reference resolves inside the document.
    text = httpx.get(f"{url}/openapi.json").text
    for ref in {part.split('"')[0] for part in text.split('"$ref":"')[1:]}:
        node = document
        for key in ref.removeprefix("#/").split("/"):
            node = node[key]


def test_a_batch_with_one_bad_event_writes_nothing(url, gw_platform):
    before = end_offsets(gw_platform, "dc1", "ad-events")
    batch = [demo_event(user_id=f"u{i}") for i in range(50)] + [demo_event(type="clack")]
    answer = post(url, "ad-events", batch)
    assert answer.status_code == 422 and answer.json()["index"] == 50
    assert end_offsets(gw_platform, "dc1", "ad-events") == before


def test_ndjson_batch_lands_whole_and_keys_keep_their_partition(url, gw_platform):
    events = [demo_event(user_id=f"user-{i % 7}") for i in range(300)]
    body = b"\n".join(orjson.dumps(e) for e in events)
    answer = post(url, "ad-events", body, content_type="application/x-ndjson")
    assert answer.status_code == 200, answer.text
    summary = answer.json()
    assert summary["accepted"] == 300 and sum(p["count"] for p in summary["partitions"]) == 300
    wanted = {e["event_id"]: e for e in events}
    landed = [m for m in read_topic(gw_platform, "dc1", "ad-events") if orjson.loads(m.value())["event_id"] in wanted]
    assert len(landed) == 300
    partitions_of_user = defaultdict(set)
    for message in landed:
        partitions_of_user[message.key()].add(message.partition())
    assert all(len(p) == 1 for p in partitions_of_user.values())
    # A request this large is produced in one batch call; a small one record by record. The
    # partitioner is the same: each user's single event lands where its batch did.
    for user in range(7):
        single = post(url, "ad-events", [demo_event(user_id=f"user-{user}")]).json()["events"][0]
        assert {single["partition"]} == partitions_of_user[f"user-{user}".encode()]
    # The summary's spans are the partitions' first and last offsets of the batch.
    spans = {p["partition"]: (p["first_offset"], p["last_offset"], p["count"]) for p in summary["partitions"]}
    for partition, (first, last, count) in spans.items():
        offsets = sorted(m.offset() for m in landed if m.partition() == partition)
        assert (offsets[0], offsets[-1], len(offsets)) == (first, last, count)
    # Per-key order: offsets of one user's events follow the order they were sent in.
    order = {e["event_id"]: i for i, e in enumerate(events)}
    by_user = defaultdict(list)
    for message in sorted(landed, key=lambda m: m.offset()):
        by_user[message.key()].append(order[orjson.loads(message.value())["event_id"]])
    assert all(seq == sorted(seq) for seq in by_user.values())


def test_publisher_and_generator_through_a_real_gateway(url, gw_platform):
    from conveyor_sdk.publisher import Publisher
    from conveyor.gateway.generate import AdTraffic, run

    with Publisher(url, "demo-adserver-token", batch_size=100) as publisher:
        result = run([publisher], "ad-events", rate=2000, duration=1.5, batch=100, traffic=AdTraffic(seed=11))
    assert result.accepted == result.sent >= 100  # pace depends on the machine; correctness does not
    sent_ids = {AdTraffic(seed=11).event()["event_id"]}
    landed = {orjson.loads(m.value())["event_id"] for m in read_topic(gw_platform, "dc1", "ad-events")}
    assert sent_ids <= landed
