"""Reading and silencing alerts in Alertmanager through its API v2 (``conveyor ops alerts``,
``ops silence``, and the alerts the dashboard shows): Prometheus's rules as the team's
Alertmanager holds them."""

from __future__ import annotations

import getpass
import ssl
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from conveyor.ops.errors import OpsError


@dataclass(frozen=True)
class ManagedAlert:
    name: str
    severity: str
    #: active, suppressed (silenced or inhibited) or unprocessed.
    state: str
    summary: str
    labels: dict[str, str]
    #: What to look at (the rule's ``look_at`` annotation); empty when it has none.
    look_at: str
    starts_at: str
    silenced_by: tuple[str, ...]


def parse_alerts(body: list[dict[str, Any]]) -> list[ManagedAlert]:
    """GET /api/v2/alerts's answer, most severe first. Pure."""
    order = {"critical": 0, "warning": 1}
    alerts = [ManagedAlert(name=a["labels"].get("alertname", ""), severity=a["labels"].get("severity", ""),
                           state=a.get("status", {}).get("state", ""),
                           summary=a.get("annotations", {}).get("summary", ""), labels=dict(a["labels"]),
                           look_at=a.get("annotations", {}).get("look_at", ""),
                           starts_at=a.get("startsAt", ""),
                           silenced_by=tuple(a.get("status", {}).get("silencedBy") or ()))
              for a in body]
    return sorted(alerts, key=lambda a: (order.get(a.severity, 2), a.name, sorted(a.labels.items())))


def silence_body(matchers: dict[str, str], hours: float, comment: str, author: str,
                 now: datetime | None = None) -> dict[str, Any]:
    """POST /api/v2/silences's body: exact matches on each label, from now for ``hours``. Pure."""
    start = now or datetime.now(UTC)
    return {"matchers": [{"name": k, "value": v, "isRegex": False, "isEqual": True} for k, v in matchers.items()],
            "startsAt": start.isoformat(), "endsAt": (start + timedelta(hours=hours)).isoformat(),
            "createdBy": author, "comment": comment}


class AlertmanagerClient:
    def __init__(self, url: str, verify: ssl.SSLContext | bool = True, timeout: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self._client = httpx.Client(timeout=timeout, verify=verify)

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._client.request(method, f"{self.url}/api/v2/{path}", **kwargs)
        except httpx.HTTPError as err:
            raise OpsError(f"Alertmanager at {self.url} did not answer ({type(err).__name__}): is it running "
                           "(`conveyor status`)?") from None
        if response.status_code >= 400:
            raise OpsError(f"Alertmanager at {self.url} refused {method} {path}: HTTP {response.status_code} "
                           f"{response.text.strip()[:200]}")
        return response.json()

    def alerts(self) -> list[ManagedAlert]:
        return parse_alerts(self._call("GET", "alerts"))

    def silence(self, matchers: dict[str, str], hours: float, comment: str) -> str:
        """Silence the alerts whose labels match; the silence's id."""
        body = silence_body(matchers, hours, comment, getpass.getuser())
        return str(self._call("POST", "silences", json=body)["silenceID"])

    def close(self) -> None:
        self._client.close()
