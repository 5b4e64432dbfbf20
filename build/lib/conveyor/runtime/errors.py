"""Errors of the local runtime."""

from __future__ import annotations

from conveyor.errors import ConveyorError


class RuntimeSetupError(ConveyorError):
    """A tool the runtime needs (java, mvn, redis-server) is missing or failed."""


class NodeFailedError(ConveyorError):
    """A process exited while starting; the message holds the tail of its log."""


class StartTimeoutError(ConveyorError):
    """Clusters did not report all their brokers in time."""
