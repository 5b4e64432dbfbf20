"""The SDK's retry rules, against scripted gateway answers (an in-process HTTP transport)."""

from __future__ import annotations

import httpx
import orjson
import pytest

from conveyor_sdk.publisher import Publisher, PublishError


def scripted(*answers: httpx.Response):
    bodies: list[bytes] = []
    script = list(answers)

    def handle(request: httpx.Request) -> httpx.Response:
        bodies.append(request.content)
        return script.pop(0)

    return httpx.MockTransport(handle), bodies


def ok(n: int) -> httpx.Response:
    return httpx.Response(200, json={"accepted": n})


def test_overload_and_outage_are_retried_with_the_same_event_ids():
    transport, bodies = scripted(httpx.Response(503, json={"error": "overloaded"}, headers={"Retry-After": "0"}),
                                 httpx.Response(502, text="bad gateway"), ok(3))
    publisher = Publisher("http://gw", "t", backoff=0.001, transport=transport)
    result = publisher.publish("ad-events", [{"user_id": "a"}, {"user_id": "b"}, {"user_id": "c"}])
    assert (result.accepted, result.attempts) == (3, 3)
    ids = [[e["event_id"] for e in orjson.loads(b)] for b in bodies]
    assert ids[0] == ids[1] == ids[2] and len(set(ids[0])) == 3


def test_a_refusal_is_not_retried_and_keeps_the_gateways_answer():
    body = {"error": "contract", "message": "event 1: type must be one of ...", "index": 1, "field": "type"}
    transport, bodies = scripted(httpx.Response(422, json=body))
    publisher = Publisher("http://gw", "t", transport=transport)
    with pytest.raises(PublishError) as caught:
        publisher.publish("ad-events", [{"user_id": "a"}, {"user_id": "b"}])
    assert caught.value.status == 422 and caught.value.body["field"] == "type" and len(bodies) == 1


def test_retries_run_out_with_the_last_reason():
    transport, bodies = scripted(*[httpx.Response(503, json={"message": "topic overloaded"})] * 3)
    publisher = Publisher("http://gw", "t", max_attempts=3, backoff=0.001, transport=transport)
    with pytest.raises(PublishError, match="gave up after 3 attempts: topic overloaded"):
        publisher.publish("ad-events", [{"user_id": "a"}])


def test_buffered_events_go_out_in_batches():
    transport, bodies = scripted(ok(2), ok(2), ok(1))
    with Publisher("http://gw", "t", batch_size=2, transport=transport) as publisher:
        for user in "abcde":
            publisher.add("ad-events", {"user_id": user, "type": "click"})
    assert [len(orjson.loads(b)) for b in bodies] == [2, 2, 1]
    assert all("event_id" in e and "event_time" in e for b in bodies for e in orjson.loads(b))
