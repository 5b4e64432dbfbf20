"""The gateway at its limits, against real brokers: every refusal is a 4xx naming the limit or the
rule, and no refused request moves an end offset on any writable cluster (nothing half-written)."""

from __future__ import annotations

import copy
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from conveyor import kafka
from conveyor.config import Platform, parse_platform
from conveyor.config.resolved import resolved
from tests.conftest import demo_event
from tests.integration.gateway.test_gateway import ADSERVER, end_offsets, post

NOTIFIER = {"Authorization": "Bearer demo-notifier-token"}

pytestmark = pytest.mark.integration
TOPIC = "ad-events"


@pytest.fixture(scope="module")
def edge_platform(provisioned: Platform, platform_data, platform_file: Path) -> Platform:
    """The gateway's default size limits (1 MiB events, 16 MiB requests), few requests at once, and
    2 s for a request's headers and for its body."""
    data = copy.deepcopy(platform_data)
    data["gateway"] = {**data.get("gateway", {}), "max_concurrent_requests": 3, "header_timeout": 2,
                       "body_timeout": 2}
    return resolved(parse_platform(data, root=platform_file.parent))


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


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
def test_a_method_other_than_post_on_the_events_path_gets_405_naming_post(url, unchanged, method):
    answer = httpx.request(method, f"{url}/v1/topics/{TOPIC}/events", headers=ADSERVER)
    refused(answer, 405, "method_not_allowed")
    assert answer.headers["Allow"] == "POST"


def test_a_client_gone_before_its_body_came_writes_nothing_and_the_next_request_lands(url, edge_platform):
    before = end_offsets(edge_platform, "dc1", TOPIC)
    host, port = url.removeprefix("http://").split(":")
    body = orjson.dumps([demo_event()])
    with socket.create_connection((host, int(port))) as gone:
        gone.sendall(f"POST /v1/topics/{TOPIC}/events HTTP/1.1\r\nHost: {host}\r\n"
                     f"Authorization: {ADSERVER['Authorization']}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(body) + 100}\r\n\r\n".encode() + body)
        time.sleep(0.5)
    assert post(url, TOPIC, [demo_event()]).json()["accepted"] == 1
    after = end_offsets(edge_platform, "dc1", TOPIC)
    assert sum(after.values()) - sum(before.values()) == 1, (before, after)


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


def test_ndjson_lines_past_the_event_limit_are_refused_before_any_is_parsed(url, unchanged):
    # The first line is not JSON: a gateway that parsed before counting answered 400 for it.
    lines = b"not json\n" + b"{}\n" * 50_000
    refused(post(url, TOPIC, lines, content_type="application/x-ndjson"), 413, "too_large", limit=50_000)


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=15)


def _raw_answer(sock: socket.socket) -> tuple[int, dict]:
    """Status and JSON body of the one answer the gateway sends before it closes the connection."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), orjson.loads(body)


def _request_head(topic: str, token: str, length: int, extra: bytes = b"") -> bytes:
    return (b"POST /v1/topics/%s/events HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer %s\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n%s\r\n"
            % (topic.encode(), token.encode(), length, extra))


def test_slow_bodies_hold_no_place_of_another_topic_and_get_408(url, unchanged):
    # As many bodies as the gateway takes requests at once, each stopping half-way: the old gateway
    # held every place for them (no deadline), and every other topic got 503.
    slow = [_connect(url) for _ in range(3)]
    for sock in slow:
        sock.sendall(_request_head(TOPIC, "demo-adserver-token", 1000) + b'{"event_id":')
    time.sleep(0.5)
    started = time.monotonic()
    event = {"event_id": demo_event()["event_id"], "event_time": demo_event()["event_time"], "user_id": "u1",
             "channel": "push", "body": "hello"}
    answer = post(url, "notifications", event, headers=NOTIFIER)
    assert answer.status_code == 200, answer.text
    assert time.monotonic() - started < 1.0
    for sock in slow:
        with sock:
            status, body = _raw_answer(sock)
        assert (status, body["error"]) == (408, "timeout") and "body" in body["message"], body
    assert time.monotonic() - started < 5.0


@pytest.mark.parametrize("extra", [b"x: v\r\n" * 5_000, b"x: " + b"v" * 100_000 + b"\r\n"],
                         ids=["5000-small-headers", "one-100-KB-header"])
def test_too_many_or_too_large_request_headers_get_431(url, unchanged, extra):
    with _connect(url) as sock:
        body = orjson.dumps(demo_event())
        sock.sendall(_request_head(TOPIC, "demo-adserver-token", len(body), extra) + body)
        status, answer = _raw_answer(sock)
    assert (status, answer["error"]) == (431, "headers_too_large"), answer
    assert answer["limit"] in (100, 32 << 10)


def test_headers_that_do_not_arrive_in_time_get_408_and_the_connection_closes(url):
    started = time.monotonic()
    with _connect(url) as sock:
        sock.sendall(b"POST /v1/topics/ad-events/events HTTP/1.1\r\nHost: gateway\r\n")
        status, answer = _raw_answer(sock)
    assert (status, answer["error"]) == (408, "timeout") and "headers" in answer["message"], answer
    assert time.monotonic() - started < 5.0


def test_requests_past_the_concurrency_bound_get_503_with_retry_after(edge_platform, serve_gateway, unchanged):
    gateway_url = serve_gateway(edge_platform, "dc1")
    gateway = serve_gateway.gateways[gateway_url]
    # Three requests being checked or written hold the gateway's three places.
    gateway._in_progress = 3
    try:
        answer = post(gateway_url, TOPIC, demo_event())
    finally:
        gateway._in_progress = 0
    refused(answer, 503, "overloaded")
    assert answer.headers["Retry-After"] == "1"
    # Health and metrics are never behind the bound.
    assert httpx.get(f"{gateway_url}/healthz").status_code == 200
