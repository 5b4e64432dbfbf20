"""The gateway at its limits, against real brokers: every refusal is a 4xx naming the limit or the
rule, and no refused request moves an end offset on any writable cluster (nothing half-written)."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from conveyor import kafka
from conveyor.config import Platform, parse_platform
from tests.conftest import demo_event
from tests.integration.test_gateway import ADSERVER, end_offsets, post

pytestmark = pytest.mark.integration
TOPIC = "ad-events"


@pytest.fixture(scope="module")
def edge_platform(provisioned: Platform, platform_data, platform_file: Path) -> Platform:
    """The gateway's default size limits (1 MiB events, 16 MiB requests), few requests at once."""
    data = copy.deepcopy(platform_data)
    data["gateway"] = {**data.get("gateway", {}), "max_concurrent_requests": 3}
    return parse_platform(data, root=platform_file.parent)


@pytest.fixture
def url(edge_platform: Platform, serve_gateway) -> str:
    return serve_gateway(edge_platform, "dc1")


@pytest.fixture
def unchanged(edge_platform: Platform) -> Iterator[None]:
    """Fails the test when any refused request moved an end offset of the topic on a writable cluster."""
    before = {c: end_offsets(edge_platform, c, TOPIC) for c in ("dc1", "dc2")}
    yield
    assert {c: end_offsets(edge_platform, c, TOPIC) for c in ("dc1", "dc2")} == before


def refused(answer: httpx.Response, status: int, error: str, **fields: object) -> dict:
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert body["error"] == error and body["message"], body
    assert fields.items() <= body.items(), body
    return body


@pytest.mark.parametrize("extra", [1_000_400, 999_950], ids=["extra-field-1000400", "just-past-the-producer"])
def test_an_event_past_kafka_s_message_size_refuses_the_whole_request(url, unchanged, extra):
    # Under the gateway's own 1 MiB limit but over librdkafka's message.max.bytes: the old gateway
    # queued the two events before it, answered 500 and left them written.
    batch = [demo_event(), demo_event(), demo_event(padding="x" * extra)]
    body = refused(post(url, TOPIC, batch), 413, "too_large", index=2)
    assert body["limit"] < 1_000_000


def test_an_event_past_the_topic_s_max_message_bytes_is_refused_and_a_batch_of_smaller_ones_lands(
        edge_platform, serve_gateway):
    admin = {c: kafka.admin(edge_platform, c) for c in ("dc1", "dc2")}
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    def set_max(value: str | None) -> None:
        op = AlterConfigOpType.SET if value else AlterConfigOpType.DELETE
        for client in admin.values():
            resource = ConfigResource(ConfigResource.Type.TOPIC, TOPIC,
                                      incremental_configs=[ConfigEntry("max.message.bytes", value or "", incremental_operation=op)])
            for future in client.incremental_alter_configs([resource]).values():
                future.result(30)

    set_max("20000")
    try:
        url = serve_gateway(edge_platform, "dc1")  # reads the topic's limit at start
        before = {c: end_offsets(edge_platform, c, TOPIC) for c in ("dc1", "dc2")}
        body = refused(post(url, TOPIC, [demo_event(), demo_event(padding="x" * 25_000)]), 413, "too_large",
                       index=1)
        assert body["limit"] <= 20_000 - 61 - 36
        assert {c: end_offsets(edge_platform, c, TOPIC) for c in ("dc1", "dc2")} == before
        # Each fits the topic, together they do not: batches must stay under the topic's limit.
        batch = [demo_event(user_id="same-user", padding="y" * 9_000) for _ in range(6)]
        answer = post(url, TOPIC, batch)
        assert answer.status_code == 200, answer.text
        assert {e["cluster"] for e in answer.json()["events"]} == {"dc1"}
    finally:
        set_max(None)


def test_an_event_nested_past_orjson_s_depth_gets_422_naming_the_rule(url, unchanged):
    nested = b'{"n":' * 300 + b"1" + b"}" * 300  # orjson reads it, and cannot write it again
    event = orjson.dumps(demo_event())[:-1] + b',"extra":' + nested + b"}"
    refused(post(url, TOPIC, b"[" + orjson.dumps(demo_event()) + b"," + event + b"]"), 422, "contract", index=1,
            field="(event)", rule="max_depth")


@pytest.mark.parametrize("price", [2**63, -(2**63) - 1, 2**64])
def test_an_integer_outside_64_bits_is_refused(url, unchanged, price):
    body = post(url, TOPIC, b'{"event_id":"%s","event_time":"2026-11-21T05:30:00Z","type":"click","site_id":"s",'
                            b'"user_id":"u","price_micros":%d}' % (demo_event()["event_id"].encode(), price))
    refused(body, 422, "contract", field="price_micros")


def test_a_leap_second_the_lake_cannot_place_is_refused(url, unchanged):
    refused(post(url, TOPIC, demo_event(event_time="2016-12-31T23:59:60Z")), 422, "contract", field="event_time",
            rule="format")


@pytest.mark.parametrize("event_time", ["0001-01-01T00:30:00+01:00", "9999-12-31T23:30:00-01:00"])
def test_an_event_time_whose_utc_is_outside_years_1_to_9999_gets_422_not_500(url, unchanged, event_time):
    refused(post(url, TOPIC, demo_event(event_time=event_time)), 422, "contract", field="event_time",
            rule="format")


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "application/xml"])
def test_a_body_that_is_not_json_or_ndjson_gets_415(url, unchanged, content_type):
    refused(post(url, TOPIC, demo_event(), content_type=content_type), 415, "unsupported_media_type")


def _chunks(total: int, size: int = 1 << 20, pause: float = 0.0) -> Iterator[bytes]:
    sent = 0
    while sent < total:
        chunk = b" " * min(size, total - sent)
        sent += len(chunk)
        if pause:
            time.sleep(pause)
        yield chunk


def test_a_large_body_without_a_valid_token_is_refused_before_it_is_read(url, unchanged):
    # Chunked: no Content-Length. The old gateway read all 40 MiB before looking at the token.
    answer = httpx.post(f"{url}/v1/topics/{TOPIC}/events", content=_chunks(40 << 20),
                        headers={"Content-Type": "application/json"}, timeout=60)
    refused(answer, 401, "unauthenticated")


def test_a_chunked_body_past_the_request_limit_gets_413(url, unchanged):
    answer = httpx.post(f"{url}/v1/topics/{TOPIC}/events", content=_chunks(17 << 20),
                        headers={**ADSERVER, "Content-Type": "application/json"}, timeout=60)
    refused(answer, 413, "too_large", limit=16 << 20)


def test_too_many_events_in_one_request_get_413(url, unchanged):
    lines = b"\n".join([orjson.dumps(demo_event())] * 50_001)
    refused(post(url, TOPIC, lines, content_type="application/x-ndjson"), 413, "too_large", limit=50_000)


def test_requests_past_the_concurrency_bound_get_503_with_retry_after(url, unchanged):
    # Three requests hold the gateway's three places, each sending its body slowly.
    holders = [threading.Thread(target=httpx.post, args=(f"{url}/v1/topics/{TOPIC}/events",),
                                kwargs={"content": _chunks(8, size=1, pause=1.0), "timeout": 60,
                                        "headers": {**ADSERVER, "Content-Type": "application/json"}})
               for _ in range(3)]
    for holder in holders:
        holder.start()
    time.sleep(2.0)
    answer = post(url, TOPIC, demo_event())
    refused(answer, 503, "overloaded")
    assert answer.headers["Retry-After"] == "1"
    for holder in holders:
        holder.join(60)
    # The places are free again: health and metrics were never behind the bound.
    assert httpx.get(f"{url}/healthz").status_code == 200
