"""The roots of every error Conveyor raises on purpose, the SDK's and the platform's.

Callers branch on the class and its fields, never on the message text. Each package adds its own
leaves next to its code (``conveyor.runtime.errors`` and so on).
"""

from __future__ import annotations


class ConveyorError(Exception):
    """Something the operator can act on; the message says what went wrong and what to do."""

    #: Exit status the CLI uses when this error reaches it.
    exit_code: int = 1


class DispatchError(ConveyorError):
    """The root of the consumer dispatcher's errors, the client's and the server's."""
