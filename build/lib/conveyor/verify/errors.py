"""Errors of ``conveyor verify``."""

from __future__ import annotations

from conveyor.errors import ConveyorError


class VerifyInputError(ConveyorError):
    """What the command was given cannot be read (the accepted file, a --dispatch-group)."""

    exit_code = 2


class SinkReadError(ConveyorError):
    """A sink answered, but not with what a check needs (a topic missing, a read that did not end)."""
