"""A large request's delivery reports, summed per partition in one callback: the failed records are
found among the request's by their bytes (identical records are interchangeable), the acknowledged
ones widen their partition's span. No broker: the reports are handed in as librdkafka would."""

from __future__ import annotations

import asyncio
from typing import NamedTuple

from confluent_kafka import KafkaError

from conveyor.gateway.writer import Record, _Batch


class Report(NamedTuple):
    """What a delivery report's message answers (confluent_kafka.Message's accessors)."""
    k: bytes
    v: bytes
    p: int
    o: int

    def key(self) -> bytes:
        return self.k

    def value(self) -> bytes:
        return self.v

    def partition(self) -> int:
        return self.p

    def offset(self) -> int:
        return self.o


def test_failed_records_are_found_by_their_bytes_and_the_rest_summed_per_partition() -> None:
    records = [Record(b"a", b"1"), Record(b"b", b"2"), Record(b"a", b"1"), Record(b"c", b"3"), Record(b"d", b"4")]
    loop = asyncio.new_event_loop()
    try:
        batch = _Batch(loop, len(records), itemized=False)
        timeout = KafkaError(KafkaError._MSG_TIMED_OUT)
        batch.on_delivery_summed(None, Report(b"b", b"2", 1, 40))
        batch.on_delivery_summed(timeout, Report(b"a", b"1", -1, -1))
        batch.on_delivery_summed(None, Report(b"d", b"4", 1, 38))
        batch.on_delivery_summed(timeout, Report(b"c", b"3", -1, -1))
        batch.on_delivery_summed(None, Report(b"a", b"1", 0, 7))
        written = batch.written(records)
        assert batch.pending == 0
    finally:
        loop.close()
    # One of the two identical records failed (either may be sent again), and "c".
    assert [records[i] for i in written.failed] == [Record(b"a", b"1"), Record(b"c", b"3")]
    assert len(set(written.failed)) == 2
    assert written.spans == {1: [38, 40, 2], 0: [7, 7, 1]}
    assert written.acked is None and written.error is timeout
