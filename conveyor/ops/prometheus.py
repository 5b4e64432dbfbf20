"""Asking a Prometheus through its HTTP API (``/api/v1/query_range``): the dashboard's panels.

Parsing the answer is pure (:func:`parse_range`); :class:`PrometheusClient` is the I/O. Every
failure, whether Prometheus cannot be reached, refuses the expression or answers something that is
not its API's JSON, is a :class:`QueryError` whose text says which: a panel shows it.
"""

from __future__ import annotations

import math
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx


class QueryError(Exception):
    """A query that gave no answer; ``unreachable`` when Prometheus itself did not answer, so the
    caller need not wait out the other queries of the round."""

    def __init__(self, message: str, unreachable: bool = False) -> None:
        super().__init__(message)
        self.unreachable = unreachable


@dataclass(frozen=True, slots=True)
class Series:
    """One series of a range query's answer: its labels and (epoch ms, value) per step, oldest
    first; a value Prometheus gives as NaN or infinite (a quantile of no observations) is None."""

    labels: Mapping[str, str]
    points: tuple[tuple[int, float | None], ...]


def _value(text: str) -> float | None:
    # Prometheus writes sample values as strings: "NaN", "+Inf" and "-Inf" among them.
    value = float(text)
    return None if math.isnan(value) or math.isinf(value) else value


def parse_range(body: Any) -> tuple[Series, ...]:
    """The series of a query_range answer (``resultType`` matrix). Raises QueryError for an error
    answer or one not in the API's shape."""
    if not isinstance(body, dict):
        raise QueryError("not Prometheus's API: the answer is not a JSON object")
    if body.get("status") != "success":
        raise QueryError(f"{body.get('errorType', 'error')}: {body.get('error', 'no reason given')}")
    data = body.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "matrix":
        kind = data.get("resultType") if isinstance(data, dict) else None
        raise QueryError(f"expected a range of series (matrix), got {kind!r}")
    try:
        return tuple(Series(dict(item["metric"]), tuple((round(float(at) * 1000), _value(v)) for at, v in item["values"]))
                     for item in data["result"])
    except (KeyError, TypeError, ValueError) as err:
        raise QueryError(f"not Prometheus's API: a series is malformed ({type(err).__name__}: {err})") from None


class PrometheusClient:
    """One Prometheus's query API over one HTTP client."""

    def __init__(self, url: str, verify: ssl.SSLContext | bool = True, timeout: float = 5.0) -> None:
        """``verify``: what an https Prometheus must be signed by (conveyor.tls.trusted)."""
        self.url = url.rstrip("/")
        self._client = httpx.Client(timeout=timeout, verify=verify)

    def query_range(self, expr: str, start: float, end: float, step: float) -> tuple[Series, ...]:
        """``expr`` evaluated every ``step`` seconds from ``start`` to ``end`` (unix seconds)."""
        try:
            response = self._client.get(f"{self.url}/api/v1/query_range",
                                        params={"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}",
                                                "step": f"{step:.3f}"})
        except httpx.HTTPError as err:
            raise QueryError(f"Prometheus at {self.url} did not answer ({type(err).__name__}: {err})",
                             unreachable=True) from None
        try:
            body = response.json()
        except ValueError:
            # Not the API (a proxy's page, a wrong URL): the status says more than the body.
            raise QueryError(f"Prometheus at {self.url} answered HTTP {response.status_code} without its API's "
                             "JSON: is ops.prometheus_url a Prometheus?") from None
        return parse_range(body)

    def close(self) -> None:
        self._client.close()
