"""``Publisher``: the Python SDK for the gateway.

Batches events, gives each an ``event_id`` before its first attempt so that every retry carries the
same id (the lake de-duplicates on it), retries what may succeed later (503, connection failures)
with exponential back-off that honours Retry-After, and raises at once on what never will (4xx).
"""

from __future__ import annotations

import ssl

import random
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import httpx
import orjson

from conveyor_sdk.errors import ConveyorError


class PublishError(ConveyorError):
    """The gateway refused the batch for good (4xx), or retries ran out; ``body`` is its answer."""

    def __init__(self, message: str, status: int | None = None, body: dict[str, Any] | None = None) -> None:
        self.status = status
        self.body = body or {}
        super().__init__(message)


@dataclass(frozen=True)
class Published:
    accepted: int
    attempts: int
    seconds: float


def stamp(event: dict[str, Any]) -> dict[str, Any]:
    """The event with an event_id and an event_time, keeping any it already has."""
    if "event_id" in event and "event_time" in event:
        return event
    now = datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return {"event_id": str(uuid.uuid4()), "event_time": now, **event}


class Publisher:
    def __init__(self, url: str, token: str, *, batch_size: int = 500, max_attempts: int = 8,
                 backoff: float = 0.2, max_backoff: float = 10.0, timeout: float = 60.0,
                 transport: httpx.BaseTransport | None = None, verify: ssl.SSLContext | str | bool = True) -> None:
        """``verify``: for an https ``url``, the CA file that signed the gateway's certificate, or
        True for the system's trusted authorities."""
        self.url = url.rstrip("/")
        self.batch_size = batch_size
        self.max_attempts = max_attempts
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._http = httpx.Client(timeout=timeout, transport=transport, verify=verify,
                                  headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        self._pending: dict[str, list[dict[str, Any]]] = {}

    def __enter__(self) -> Publisher:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self.flush()
        self._http.close()

    def add(self, topic: str, event: dict[str, Any]) -> Published | None:
        """Buffer one event; sends the topic's batch when it is full."""
        batch = self._pending.setdefault(topic, [])
        batch.append(stamp(event))
        if len(batch) >= self.batch_size:
            return self.publish(topic, self._pending.pop(topic))
        return None

    def flush(self) -> None:
        for topic in list(self._pending):
            self.publish(topic, self._pending.pop(topic))

    def publish(self, topic: str, events: Iterable[dict[str, Any]]) -> Published:
        """Send one batch, all-or-nothing, retrying it whole with the same event ids."""
        body = orjson.dumps([stamp(e) for e in events])
        started = time.monotonic()
        for attempt in range(1, self.max_attempts + 1):
            try:
                answer = self._http.post(f"{self.url}/v1/topics/{topic}/events", content=body)
            except httpx.TransportError as err:
                reason, retry_after = f"gateway unreachable: {err}", None
            else:
                if answer.status_code == 200:
                    return Published(answer.json()["accepted"], attempt, time.monotonic() - started)
                payload = _json(answer)
                if answer.status_code != 503 and answer.status_code < 500:
                    raise PublishError(f"gateway refused the batch ({answer.status_code}): "
                                       f"{payload.get('message', answer.text)}", answer.status_code, payload)
                reason = payload.get("message", f"HTTP {answer.status_code}")
                retry_after = _float(answer.headers.get("Retry-After"))
            if attempt == self.max_attempts:
                raise PublishError(f"gave up after {attempt} attempts: {reason}")
            delay = min(self.max_backoff, self.backoff * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)
            time.sleep(max(delay, retry_after or 0.0))
        raise AssertionError("unreachable")


def _json(answer: httpx.Response) -> dict[str, Any]:
    try:
        payload = answer.json()
    except ValueError:
        return {}
    return payload if isinstance(payload, dict) else {}


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None
