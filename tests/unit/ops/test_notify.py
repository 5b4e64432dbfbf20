"""The watcher's alerts to a webhook: one post per change of state, Alertmanager's shape, retried
with back-off against a real HTTP receiver that fails the first attempts."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conveyor.ops.alerts import Alert
from conveyor.ops.health import Severity
from conveyor.ops.notify import WebhookNotifier, changes, payload
from tests.conftest import eventually


def _alert(rule: str, subject: str, severity: Severity = Severity.CRITICAL) -> Alert:
    return Alert(severity, rule, "central", subject, f"{rule} on {subject}", "look here", since_ms=1_000)


class Receiver:
    """A webhook receiver that answers 500 to its first ``failures`` posts."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.bodies: list[dict] = []
        self.attempts = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                receiver.attempts += 1
                if receiver.attempts <= receiver.failures:
                    self.send_response(500)
                else:
                    receiver.bodies.append(body)
                    self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: object) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"


@pytest.fixture
def receiver(request: pytest.FixtureRequest) -> Iterator[Receiver]:
    r = Receiver(getattr(request, "param", 0))
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
def test_posts_are_retried_and_arrive_once_each_in_order(receiver: Receiver) -> None:
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
def test_a_receiver_that_never_answers_costs_a_dropped_change_not_the_watcher(receiver: Receiver) -> None:
    notifier = WebhookNotifier(receiver.url, "demo", attempts=3, backoff=0.01)
    notifier.update([_alert("lag_stop", "mailer")], 1_000)
    eventually(lambda: notifier.dropped == 1, 10, "the change given up after 3 attempts")
    notifier.close()
    assert (receiver.attempts, notifier.sent) == (3, 0)
