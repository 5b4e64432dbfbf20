"""librdkafka's log lines into Python logging, at the level they mean here.

Left alone, librdkafka prints its log to stderr from its own threads (``%4|1795537330|GETPID|
conveyor-smoke#producer-2| ... retrying``), past any logging configuration, into every command's
output. Each client that :mod:`conveyor.kafka` builds is given :data:`LIBRDKAFKA` as its ``logger``
instead; the lines then arrive on the thread that polls the client, as records of the
``conveyor.librdkafka`` logger (shown from WARNING unless ``--log-level`` asks for more).

librdkafka rates some events higher than they matter to a caller of Conveyor's clients: a broker
connection that failed or closed (a broker restarting, the platform going down), or an idempotent
producer retrying for its id while a coordinator loads. The client retries each by itself, and what
lasts reaches the caller as a failed request or through ``error_cb``; those lines are INFO.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

_LOG = logging.getLogger("conveyor.librdkafka")


@dataclass(frozen=True, slots=True)
class Demotion:
    """A librdkafka line whose ``facility`` matches, and whose text holds ``text`` (any text when
    empty), is logged at ``level``."""

    facility: str
    text: str = ""
    level: int = logging.INFO

    def matches(self, facility: str, text: str) -> bool:
        return facility == self.facility and self.text in text


DEMOTIONS = (
    # Connect refused, connection reset, "Disconnected" at a broker's shutdown: reconnected by itself.
    Demotion("FAIL"),
    # "Failed to acquire idempotence PID ... Coordinator load in progress: retrying" after a cluster starts.
    Demotion("GETPID", "retrying"),
)


def level_of(level: int, facility: str, text: str) -> int:
    """The Python level of a librdkafka line (already mapped to Python's levels by the client). Pure."""
    for demotion in DEMOTIONS:
        if demotion.matches(facility, text):
            return min(level, demotion.level)
    return level


class LibrdkafkaLog:
    """What confluent-kafka calls for each line: ``log(level, "%s [%s] %s", facility, client, text)``."""

    def log(self, level: int, fmt: str, facility: str = "", client: str = "", text: str = "", *rest: object) -> None:
        mapped = level_of(level, facility, text)
        if _LOG.isEnabledFor(mapped):
            _LOG.log(mapped, fmt, facility, client, text, *rest)


LIBRDKAFKA = LibrdkafkaLog()
