"""The watcher's alerts to a webhook (one post per change of state, Alertmanager's shape, retried
with back-off against a real HTTP receiver that fails the first attempts) and to Alertmanager's API."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from conveyor.ops.alerts import Alert
from conveyor.ops.health import Severity
from conveyor.ops.notify import AlertmanagerNotifier, WebhookNotifier, changes, payload
from tests.conftest import eventually
from tests.opskit import WebhookReceiver


def _alert(rule: str, subject: str, severity: Severity = Severity.CRITICAL) -> Alert:
    return Alert(severity, rule, "central", subject, f"{rule} on {subject}", "look here", since_ms=1_000)


@pytest.fixture
def receiver(request: pytest.FixtureRequest) -> Iterator[WebhookReceiver]:
    r = WebhookReceiver(getattr(request, "param", 0))
    yield r
    r.server.shutdown()


def test_changes_name_what_fired_and_what_resolved() -> None:
    stop, slow = _alert("lag_stop", "mailer"), _alert("request_slow", "broker-1", Severity.WARNING)
    active, first = changes({}, [stop, slow], 10)
    assert first is not None and set(first.fired) == {stop, slow} and not first.resolved
    active, same = changes(active, [stop, slow], 20)
    assert same is None, "no post when nothing changed"
    worse = _alert("request_slow", "broker-1", Severity.CRITICAL)
    active, moved = changes(active, [stop, worse], 30)
    assert moved is not None and moved.fired == (worse,) and moved.resolved == (slow,)
    _, cleared = changes(active, [], 40)
    assert cleared is not None and set(cleared.resolved) == {stop, worse} and not cleared.fired


def test_the_payload_has_alertmanagers_shape() -> None:
    _, change = changes({}, [_alert("lag_stop", "mailer")], 2_000)
    assert change is not None
    body = payload(change, "demo", "http://127.0.0.1:18070/")
    assert {"version", "groupKey", "status", "receiver", "groupLabels", "commonLabels", "commonAnnotations",
            "externalURL", "alerts", "truncatedAlerts"} <= body.keys()
    (alert,) = body["alerts"]
    assert alert["labels"] == {"alertname": "lag_stop", "cluster": "central", "subject": "mailer",
                               "severity": "critical", "platform": "demo"}
    assert (alert["status"], alert["startsAt"], alert["endsAt"]) == ("firing", "1970-01-01T00:00:01Z",
                                                                      "0001-01-01T00:00:00Z")


@pytest.mark.parametrize("receiver", [2], indirect=True)
def test_posts_are_retried_and_arrive_once_each_in_order(receiver: WebhookReceiver) -> None:
    notifier = WebhookNotifier(receiver.url, "demo", attempts=5, backoff=0.05)
    stop = _alert("lag_stop", "mailer")
    notifier.update([stop], 5_000)
    notifier.update([stop], 6_000)  # nothing changed: no post
    notifier.update([], 7_000)
    notifier.close()
    assert receiver.attempts == 4, "two failed attempts, then one post per change"
    assert [b["status"] for b in receiver.bodies] == ["firing", "resolved"]
    resolved = receiver.bodies[1]["alerts"][0]
    assert (resolved["status"], resolved["endsAt"]) == ("resolved", "1970-01-01T00:00:07Z")
    assert (notifier.sent, notifier.dropped) == (2, 0)


@pytest.mark.parametrize("receiver", [100], indirect=True)
def test_a_receiver_that_never_answers_costs_a_dropped_change_not_the_watcher(receiver: WebhookReceiver) -> None:
    notifier = WebhookNotifier(receiver.url, "demo", attempts=3, backoff=0.01)
    notifier.update([_alert("lag_stop", "mailer")], 1_000)
    eventually(lambda: notifier.dropped == 1, 10, "the change given up after 3 attempts")
    notifier.close()
    assert (receiver.attempts, notifier.sent) == (3, 0)


def test_alertmanager_gets_every_firing_alert_again_each_minute_and_the_resolved_once(receiver: WebhookReceiver) -> None:
    notifier = AlertmanagerNotifier(receiver.url.removesuffix("/hook"), "demo", resend_ms=60_000)
    stop, slow = _alert("lag_stop", "mailer"), _alert("request_slow", "broker-1", Severity.WARNING)
    notifier.update([stop], 100_000)             # fired: posted
    notifier.update([stop], 130_000)             # no change, renewed less than a minute ago: nothing
    notifier.update([stop, slow], 140_000)       # fired: posted, with stop again
    notifier.update([slow], 150_000)             # stop resolved: posted
    notifier.update([slow], 211_000)             # a minute on: renewed
    notifier.update([], 220_000)                 # slow resolved
    notifier.update([], 400_000)                 # nothing fires: nothing to renew
    notifier.close()
    assert [sorted((a["labels"]["alertname"], a["endsAt"]) for a in body) for body in receiver.bodies] == [
        [("lag_stop", "1970-01-01T00:06:40Z")],
        [("lag_stop", "1970-01-01T00:07:20Z"), ("request_slow", "1970-01-01T00:07:20Z")],
        [("lag_stop", "1970-01-01T00:02:30Z"), ("request_slow", "1970-01-01T00:07:30Z")],
        [("request_slow", "1970-01-01T00:08:31Z")],
        [("request_slow", "1970-01-01T00:03:40Z")],
    ]
    assert set(receiver.bodies[0][0]) == {"labels", "annotations", "startsAt", "endsAt", "generatorURL"}
