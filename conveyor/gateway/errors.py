"""Why the gateway refuses a request. Each refusal maps to one HTTP status and one metric reason."""

from __future__ import annotations

from typing import Any

from conveyor.auth import TooManyAttempts
from conveyor.errors import Refusal


class Rejection(Refusal):
    """What the request carries is refused (its body, size, topic, or the gateway's state)."""


class MalformedBody(Rejection):
    status, reason = 400, "malformed"


class UnsupportedMediaType(Rejection):
    status, reason = 415, "unsupported_media_type"


class UnknownTopic(Rejection):
    status, reason = 404, "unknown_topic"


class TooLarge(Rejection):
    status, reason = 413, "too_large"


class ContractViolation(Rejection):
    status, reason = 422, "contract"


class RequestTimeout(Rejection):
    """The request's headers or body did not arrive within their deadline: a slow sender holds a
    connection for a bounded time only."""

    status, reason = 408, "timeout"


class HeadersTooLarge(Rejection):
    status, reason = 431, "headers_too_large"


class Overloaded(Rejection):
    """The topic's lane is full: fail at once so one slow topic never holds the others up."""

    status, reason = 503, "overloaded"

    def __init__(self, message: str, retry_after: int, **details: Any) -> None:
        self.retry_after = retry_after
        super().__init__(message, **details)


class Unavailable(Rejection):
    """No writable cluster acknowledged the events in time; nothing was acknowledged to the caller."""

    status, reason = 503, "unavailable"


def refusal_headers(err: Refusal) -> dict[str, str]:
    """A refusal's headers beyond its body's type, on whichever route refuses it."""
    if isinstance(err, (Overloaded, TooManyAttempts)):
        return {"Retry-After": str(err.retry_after)}
    # The rest of a late body may still come: the connection cannot carry another request.
    return {"Connection": "close"} if isinstance(err, RequestTimeout) else {}
