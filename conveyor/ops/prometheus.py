"""Asking a Prometheus through its HTTP API: ranges (``/api/v1/query_range``) for the dashboard's
panels; instant values (``/api/v1/query``) for the watcher's figures of every broker, and the brokers'
rates that the balancer, the partition advisor and the throttle controller act on.

Parsing the answers is pure (:func:`parse_range`, :func:`parse_vector`); :class:`PrometheusClient`
is the I/O. Every
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

from conveyor.config import Platform
from conveyor.tls import trusted

#: Why a reader of the brokers' figures has none: what to set.
NO_PROMETHEUS = ("no Prometheus: set ops.prometheus_url, or runtime.prometheus for the one `conveyor up` starts "
                 "(docs/ops.md)")


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


@dataclass(frozen=True, slots=True)
class Sample:
    """One series of an instant query's answer: its labels (``__name__`` among them) and value."""

    labels: Mapping[str, str]
    value: float | None


def _result(body: Any, kind: str, what: str) -> Any:
    """The ``result`` of an answer whose ``resultType`` is ``kind``. Raises QueryError."""
    if not isinstance(body, dict):
        raise QueryError("not Prometheus's API: the answer is not a JSON object")
    if body.get("status") != "success":
        raise QueryError(f"{body.get('errorType', 'error')}: {body.get('error', 'no reason given')}")
    data = body.get("data")
    if not isinstance(data, dict) or data.get("resultType") != kind:
        found = data.get("resultType") if isinstance(data, dict) else None
        raise QueryError(f"expected {what} ({kind}), got {found!r}")
    return data.get("result")


def parse_range(body: Any) -> tuple[Series, ...]:
    """The series of a query_range answer (``resultType`` matrix). Raises QueryError for an error
    answer or one not in the API's shape."""
    result = _result(body, "matrix", "a range of series")
    try:
        return tuple(Series(dict(item["metric"]), tuple((round(float(at) * 1000), _value(v)) for at, v in item["values"]))
                     for item in result)
    except (KeyError, TypeError, ValueError) as err:
        raise QueryError(f"not Prometheus's API: a series is malformed ({type(err).__name__}: {err})") from None


def parse_vector(body: Any) -> tuple[Sample, ...]:
    """The samples of an instant query's answer (``resultType`` vector). Raises QueryError as
    :func:`parse_range` does."""
    result = _result(body, "vector", "one sample per series")
    try:
        return tuple(Sample(dict(item["metric"]), _value(item["value"][1])) for item in result)
    except (KeyError, TypeError, ValueError, IndexError) as err:
        raise QueryError(f"not Prometheus's API: a sample is malformed ({type(err).__name__}: {err})") from None


class PrometheusClient:
    """One Prometheus's query API over one HTTP client."""

    def __init__(self, url: str, verify: ssl.SSLContext | bool = True, timeout: float = 5.0) -> None:
        """``verify``: what an https Prometheus must be signed by (conveyor.tls.trusted)."""
        self.url = url.rstrip("/")
        self._client = httpx.Client(timeout=timeout, verify=verify)

    def query_range(self, expr: str, start: float, end: float, step: float) -> tuple[Series, ...]:
        """``expr`` evaluated every ``step`` seconds from ``start`` to ``end`` (unix seconds)."""
        return parse_range(self._get("query_range", {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}",
                                                     "step": f"{step:.3f}"}))

    def query(self, expr: str) -> tuple[Sample, ...]:
        """``expr`` evaluated now: the latest sample of each series it selects."""
        return parse_vector(self._get("query", {"query": expr}))

    def _get(self, endpoint: str, params: Mapping[str, str]) -> Any:
        """The API's JSON answer. Raises QueryError when Prometheus does not answer, or answers
        something else than its API's JSON."""
        try:
            response = self._client.get(f"{self.url}/api/v1/{endpoint}", params=params)
        except httpx.HTTPError as err:
            raise QueryError(f"Prometheus at {self.url} did not answer ({type(err).__name__}: {err})",
                             unreachable=True) from None
        try:
            body = response.json()
        except ValueError:
            # Not the API (a proxy's page, a wrong URL): the status says more than the body.
            raise QueryError(f"Prometheus at {self.url} answered HTTP {response.status_code} without its API's "
                             "JSON: is ops.prometheus_url a Prometheus?") from None
        return body

    def close(self) -> None:
        self._client.close()


def prometheus_url(platform: Platform) -> str | None:
    """The Prometheus that scrapes the platform: ``ops.prometheus_url``, else the local one `conveyor
    up` starts for ``runtime.prometheus``, else none."""
    if platform.ops.prometheus_url is not None:
        return platform.ops.prometheus_url
    local = platform.runtime.prometheus
    return f"http://127.0.0.1:{local.port}" if local is not None else None


def connect(platform: Platform, timeout: float = 5.0) -> PrometheusClient | None:
    """A client of :func:`prometheus_url`, trusting what the platform's clients trust; None without one."""
    url = prometheus_url(platform)
    return PrometheusClient(url, trusted(platform), timeout) if url is not None else None
