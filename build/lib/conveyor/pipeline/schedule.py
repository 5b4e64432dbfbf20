"""When the lake scheduler runs again, which failed runs it outlives, and its exit status. Pure.

A failed run leaves nothing visible and commits no offsets, so the next run reads the failed run's
range again: the scheduler's retry is its next run, at the next interval, with no back-off.
"""

from __future__ import annotations

from dataclasses import dataclass

from conveyor.kafka import KafkaOperationError
from conveyor.pipeline.errors import RunFailedError

#: Exit status of a lake run, or of a scheduler one of whose runs, that found data lost to
#: retention before it landed (recorded in lake.ops.gaps; the runs went on).
EXIT_DATA_LOST = 3

#: Failures the next run repairs: Spark's and Kafka's. Any other (a contract the records do not
#: fit, offsets ahead of a partition) would fail every run the same way, so it stops the scheduler.
RETRYABLE: tuple[type[Exception], ...] = (RunFailedError, KafkaOperationError)


@dataclass(frozen=True)
class Schedule:
    #: Seconds from the start of one run to the start of the next.
    every: float

    def wait(self, started: float, now: float) -> float:
        """Seconds to wait after a run that started at ``started`` (``now`` on the same clock): a run
        that overran its interval is followed at once rather than skipping to the next slot."""
        return max(0.0, self.every - (now - started))


def exit_status(lost: bool) -> int:
    return EXIT_DATA_LOST if lost else 0
