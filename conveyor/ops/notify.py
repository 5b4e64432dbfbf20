"""The watcher's alerts to Alertmanager's API, or to a webhook in Alertmanager's webhook shape.

The alerts only the watcher can judge (Burrow's window rules, rewinds from the offset history)
have no Prometheus expression; operators route them with the same receivers as Prometheus's own
(a chat hook, PagerDuty, Alertmanager's webhook receivers). A round that raises a new alert or
clears one posts once: the alerts that fired and those resolved. A post that fails is retried with
back-off on a thread of its own, so a slow receiver never holds the watcher's rounds, and the
posts leave in the order the changes happened. With an Alertmanager, the watcher posts to its
/api/v2/alerts instead, renewing what still fires every minute as Prometheus does, and
Alertmanager's route decides who hears of it (and silences hold).
"""

from __future__ import annotations

import hashlib
import logging
import queue
import ssl
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import httpx

from conveyor.ops.alerts import Alert

log = logging.getLogger(__name__)

#: Alertmanager's "not ended" time.
_ZERO_TIME = "0001-01-01T00:00:00Z"
Key = tuple[str, str, str]


def _key(alert: Alert) -> Key:
    return alert.cluster, alert.rule, alert.subject


def _time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class Change:
    fired: tuple[Alert, ...]
    resolved: tuple[Alert, ...]
    at_ms: int


def changes(active: dict[Key, Alert], alerts: Iterable[Alert], at_ms: int) -> tuple[dict[Key, Alert], Change | None]:
    """The alerts active now, and what changed since ``active`` (None when nothing did). An alert
    whose severity changed is resolved at the old severity and fired at the new one."""
    now = {_key(a): a for a in alerts}
    fired = tuple(a for k, a in now.items() if k not in active or active[k].severity != a.severity)
    resolved = tuple(a for k, a in active.items() if k not in now or now[k].severity != a.severity)
    return now, (Change(fired, resolved, at_ms) if fired or resolved else None)


def _entry(alert: Alert, status: str, platform: str, external_url: str, at_ms: int, ends_ms: int | None) -> dict[str, Any]:
    """One alert as both Alertmanager's webhook body and its /api/v2/alerts take it."""
    labels = {"alertname": alert.rule, "cluster": alert.cluster, "subject": alert.subject,
              "severity": alert.severity.name.lower(), "platform": platform}
    started = alert.since_ms if alert.since_ms is not None else at_ms
    return {"status": status, "labels": labels, "annotations": {"summary": alert.message, "look_at": alert.look_at},
            "startsAt": _time(started), "endsAt": _time(ends_ms) if ends_ms is not None else _ZERO_TIME,
            "generatorURL": external_url,
            "fingerprint": hashlib.sha256(repr(sorted(labels.items())).encode()).hexdigest()[:16]}


def payload(change: Change, platform: str, external_url: str) -> dict[str, Any]:
    """Alertmanager's webhook body (version 4) for one change."""
    at = change.at_ms
    alerts = ([_entry(a, "firing", platform, external_url, at, None) for a in change.fired]
              + [_entry(a, "resolved", platform, external_url, at, at) for a in change.resolved])
    return {"version": "4", "groupKey": f"conveyor:{platform}", "truncatedAlerts": 0,
            "status": "firing" if change.fired else "resolved", "receiver": "conveyor",
            "groupLabels": {"platform": platform}, "commonLabels": {"platform": platform},
            "commonAnnotations": {}, "externalURL": external_url, "alerts": alerts}


#: How long Alertmanager keeps an alert firing that the watcher has not posted again: a watcher that
#: dies leaves no alert firing for ever (the rules' ConveyorComponentAbsentWatcher takes over).
LEASE_MS = 5 * 60_000


def alertmanager_alerts(active: Iterable[Alert], change: Change, platform: str, external_url: str) -> list[dict[str, Any]]:
    """The body of a post to Alertmanager's /api/v2/alerts: every active alert with an end a lease
    ahead (renewed by the next post), and the resolved ones ended now."""
    at = change.at_ms
    fields = ("labels", "annotations", "startsAt", "endsAt", "generatorURL")
    alerts = ([_entry(a, "firing", platform, external_url, at, at + LEASE_MS) for a in active]
              + [_entry(a, "resolved", platform, external_url, at, at) for a in change.resolved])
    return [{k: alert[k] for k in fields} for alert in alerts]


class Notifier:
    """Posts the watcher's alerts from a thread of its own, retried with back-off, in order."""

    def __init__(self, url: str, platform: str, external_url: str = "", attempts: int = 5,
                 backoff: float = 0.5, timeout: float = 5.0, verify: ssl.SSLContext | bool = True) -> None:
        self.url = url
        #: What logs name: the host alone, since a hook's path or query often holds its secret.
        self.shown = _host_of(url)
        self.platform = platform
        self.external_url = external_url
        self.attempts = attempts
        self.backoff = backoff
        self._client = httpx.Client(timeout=timeout, verify=verify)
        self._active: dict[Key, Alert] = {}
        self._queue: queue.Queue[Any] = queue.Queue()
        self._stop = threading.Event()
        self.sent = 0
        self.dropped = 0
        self._thread = threading.Thread(target=self._send_forever, name="ops-notify", daemon=True)
        self._thread.start()

    def update(self, alerts: Iterable[Alert], at_ms: int) -> None:
        """The alerts of a round; a post is queued when ``body`` makes one."""
        self._active, change = changes(self._active, alerts, at_ms)
        body = self.body(change or Change((), (), at_ms), self._active.values())
        if body is not None:
            self._queue.put(body)

    def body(self, change: Change, active: Iterable[Alert]) -> Any:
        """What to post after a round (None: nothing)."""
        raise NotImplementedError

    def _send_forever(self) -> None:
        while (body := self._queue.get()) is not None:
            for attempt in range(self.attempts):
                try:
                    self._client.post(self.url, json=body).raise_for_status()
                    self.sent += 1
                    break
                except httpx.HTTPError as err:
                    log.warning("alerts to %s: attempt %d of %d failed (%s)", self.shown, attempt + 1,
                                self.attempts, _failure(err))
                    if self._stop.wait(self.backoff * 2 ** attempt):
                        return
            else:
                self.dropped += 1
                log.error("alerts to %s: a post of %d alert(s) not delivered after %d attempts", self.shown,
                          len(body["alerts"] if isinstance(body, dict) else body), self.attempts)

    def close(self, timeout: float = 10.0) -> None:
        """Send what is queued (within ``timeout``), then stop."""
        self._queue.put(None)
        self._thread.join(timeout)
        self._stop.set()
        self._client.close()


class WebhookNotifier(Notifier):
    """Alertmanager's webhook body to a receiver, once per change of state."""

    def body(self, change: Change, active: Iterable[Alert]) -> dict[str, Any] | None:
        if not (change.fired or change.resolved):
            return None
        return payload(change, self.platform, self.external_url)


class AlertmanagerNotifier(Notifier):
    """The alerts to Alertmanager's API: on every change, and every ``resend_ms`` while any fires
    (as Prometheus renews its own), so that Alertmanager groups, silences and routes them."""

    def __init__(self, base_url: str, platform: str, external_url: str = "", resend_ms: int = 60_000,
                 **kwargs: Any) -> None:
        super().__init__(base_url.rstrip("/") + "/api/v2/alerts", platform, external_url, **kwargs)
        self.resend_ms = resend_ms
        self._posted_ms = 0

    def body(self, change: Change, active: Iterable[Alert]) -> list[dict[str, Any]] | None:
        firing = list(active)
        due = firing and change.at_ms - self._posted_ms >= self.resend_ms
        if not (change.fired or change.resolved or due):
            return None
        self._posted_ms = change.at_ms
        return alertmanager_alerts(firing, change, self.platform, self.external_url)


def _host_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")


def _failure(err: httpx.HTTPError) -> str:
    """The failure without the URL, which httpx's messages repeat."""
    if isinstance(err, httpx.HTTPStatusError):
        return f"HTTP {err.response.status_code}"
    return type(err).__name__
