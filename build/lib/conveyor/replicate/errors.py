"""What the replicator raises on purpose."""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import KafkaError

from conveyor.errors import ConveyorError
from conveyor.replicate.bucket_state import ProducerError, Refusal
from conveyor.replicate.plan import SourcePartition

#: What a newer owner's init_transactions makes the old producer see.
FENCE_CODES = (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)
#: What the destination says of a record larger than it takes.
_TOO_LARGE = {KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE}


class ReplicateError(ConveyorError):
    """The replicator cannot go on as configured."""


class UnknownRoute(ReplicateError):
    exit_code = 2


class Fenced(ReplicateError):
    """The producer cannot go on: another worker owns this bucket now (``by_newer_owner``), and this
    copier must stop without touching anything; or its transactional state failed for another reason
    (INVALID_TXN_STATE after a just-created route topic), and the copier takes the bucket over again
    with a new producer, since nobody else will while this worker holds it."""

    def __init__(self, error: KafkaError | None = None) -> None:
        super().__init__(error.str() if error is not None else "fenced")
        self.by_newer_owner = error is None or error.code() in FENCE_CODES


@dataclass(frozen=True)
class CopyFailure:
    """Why a batch was not copied: a record the destination refused (its source partition and
    offset), or a failure of the batch as a whole (a flush that timed out, an aborted
    transaction, a bookkeeping write), which names no record."""

    error: KafkaError
    source: SourcePartition | None = None
    offset: int | None = None

    def refusal(self) -> Refusal:
        return Refusal(self.error.str(), self.source, self.offset, self.error.code() in _TOO_LARGE)


def producer_error(error: KafkaError) -> ProducerError:
    """A producer's error as the bucket's state machine reads it."""
    return ProducerError(error.str(), fatal=error.fatal(), fenced=error.code() in FENCE_CODES,
                         abortable=error.txn_requires_abort(), retriable=error.retriable())
