"""The platform's errors: the root every error Conveyor raises on purpose comes from the SDK (an
error of a client and one of a service are caught alike), and the refusals of the services.

Callers branch on the class and its fields, never on the message text. Each package adds its
own leaves next to its code (``conveyor.runtime.errors`` and so on).
"""

from __future__ import annotations

from typing import Any

from conveyor_sdk.errors import ConveyorError

__all__ = ["ConveyorError", "Refusal"]


class Refusal(ConveyorError):
    """A request refused before anything was read or written, by any service that lets others in.
    ``status`` is its HTTP status (the dispatcher maps the class to a gRPC code), ``reason`` the
    short name clients and metrics branch on, and the body names what is wrong."""

    status: int = 400
    reason: str = "bad_request"

    def __init__(self, message: str, **details: Any) -> None:
        self.details = details
        super().__init__(message)

    def body(self) -> dict[str, Any]:
        return {"error": self.reason, "message": str(self), **self.details}
