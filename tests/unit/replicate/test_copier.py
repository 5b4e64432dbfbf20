"""BucketCopier carrying out its state machine's decisions, against fake Kafka clients that keep
what librdkafka does where the copier depends on it: a commit after a failed delivery needs an
abort, and unassigning a partition that is not assigned raises."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from conveyor.config import ReplicationMode, Route
from conveyor.replicate import copier, plan
from conveyor.replicate.bookkeeping import BucketRecords
from conveyor.replicate.bucket_state import Phase
from conveyor.replicate.copier import BucketCopier
from conveyor.replicate.metrics import ReplicateMetrics
from conveyor.replicate.plan import SourcePartition
from conveyor.replicate.route_state import RouteState

ROUTE = "dc1-central"
T0, T1 = SourcePartition("t", 0), SourcePartition("t", 1)


def record(source: SourcePartition, offset: int, value: bytes = b"v") -> Message:
    return Message(topic=source.topic, partition=source.partition, offset=offset, key=b"k", value=value,
                   timestamp=(1, 1_000))


def out_of_range(source: SourcePartition, offset: int) -> Message:
    return Message(topic=source.topic, partition=source.partition, offset=offset,
                   error=KafkaError(KafkaError._AUTO_OFFSET_RESET))


class FakeProducer:
    def __init__(self, refuse: Callable[[bytes], KafkaError | None], commit_errors: list[KafkaError]) -> None:
        self.refuse, self.commit_errors = refuse, commit_errors
        self.open: list[tuple] = []
        self.committed: list[list[tuple]] = []
        self.aborts = 0

    def init_transactions(self, _timeout: float) -> None:
        # As librdkafka: once the producer is ready, initializing it again is an invalid state.
        if getattr(self, "ready", False):
            raise KafkaException(KafkaError(KafkaError._STATE, "Operation not valid in state Ready"))
        self.ready = True

    def begin_transaction(self) -> None:
        self.open = []

    def produce(self, topic, value, key, on_delivery=None, **kwargs) -> None:
        if len(value) > 1_000:
            raise KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
        self.open.append((topic, key, value, kwargs.get("partition"), on_delivery))

    def commit_transaction(self, _timeout: float) -> None:
        if self.commit_errors:
            raise KafkaException(self.commit_errors.pop(0))
        failed = False
        for *_, value, _partition, on_delivery in self.open:
            error = self.refuse(value)
            failed |= error is not None
            if on_delivery is not None:
                on_delivery(error, None)
        if failed:
            raise KafkaException(KafkaError(KafkaError._INCONSISTENT, txn_requires_abort=True))
        self.committed.append([entry[:4] for entry in self.open])
        self.open = []

    def abort_transaction(self, _timeout: float) -> None:
        self.open, self.aborts = [], self.aborts + 1

    def flush(self, _timeout: float) -> int:
        return 0

    def poll(self, _timeout: float) -> int:
        return 0


class FakeConsumer:
    def __init__(self, rounds: list[list[Message]], bounds: dict, done: Callable[[], None]) -> None:
        self.rounds, self.bounds, self.done = rounds, bounds, done
        self.assigned: dict[tuple[str, int], int] = {}
        self.seeks: list[tuple[str, int, int]] = []
        self.closed = False

    def consume(self, _n: int, _wait: float) -> list[Message]:
        if not self.rounds:
            self.done()
            return []
        return self.rounds.pop(0)

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        self.assigned |= {(tp.topic, tp.partition): tp.offset for tp in partitions}

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            if (tp.topic, tp.partition) not in self.assigned:
                raise KafkaException(KafkaError(KafkaError._INVALID_ARG, "Can't subtract from empty assignment"))
            del self.assigned[(tp.topic, tp.partition)]

    def seek(self, tp: TopicPartition) -> None:
        self.seeks.append((tp.topic, tp.partition, tp.offset))

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float | None = None, cached: bool = False):
        found = self.bounds.get((tp.topic, tp.partition))
        if isinstance(found, BaseException):
            raise found
        return found

    def close(self) -> None:
        self.closed = True


class FakeAdmin:
    def __init__(self, earliest: dict[tuple[str, int], int]) -> None:
        self.earliest = earliest

    def list_offsets(self, wanted: dict, request_timeout: float) -> dict:
        answers = {}
        for tp in wanted:
            answers[tp] = future = Future()
            future.set_result(SimpleNamespace(offset=self.earliest[(tp.topic, tp.partition)]))
        return answers


class FakeFeed:
    def __init__(self, *_args, **_kwargs) -> None:
        self.last = None

    def due(self) -> bool:
        return False

    def publish_and_wait(self, positions, attempts: int) -> bool:
        self.last = positions
        return True

    def close(self) -> None:
        pass


class Run:
    """One copier of bucket 0 of a route whose one bucket holds t[0] and t[1], run to its end."""

    def __init__(self, monkeypatch, stored: dict[SourcePartition, int], rounds: list[list[Message]],
                 earliest: dict[tuple[str, int], int] | None = None, bounds: dict | None = None,
                 refuse: Callable[[bytes], KafkaError | None] = lambda _value: None,
                 commit_errors: list[KafkaError] | None = None, read_failures: int = 0) -> None:
        self.metrics = ReplicateMetrics()
        route = Route(source="dc1", destination="central", pattern="t", buckets=1)
        platform = SimpleNamespace(copy_mode=lambda _route, _topic: ReplicationMode.exactly_once)
        shared = RouteState(platform, ROUTE, route, "w", self.metrics, {"t": 2}, {"t": 2})
        self.copier = BucketCopier(shared, 0, ReplicationMode.exactly_once)
        self.producers: list[FakeProducer] = []
        self.consumer = FakeConsumer(rounds, bounds or {}, self.copier.stop)
        self.feed = FakeFeed()
        commit_errors = commit_errors if commit_errors is not None else []

        def producer(_config):
            self.producers.append(FakeProducer(refuse, commit_errors))
            return self.producers[-1]

        monkeypatch.setattr(copier, "Producer", producer)
        monkeypatch.setattr(copier.kafka, "producer_config", lambda *args: {})
        monkeypatch.setattr(copier.kafka, "consumer", lambda *args: self.consumer)
        monkeypatch.setattr(copier.kafka, "admin", lambda *args: FakeAdmin(earliest or {}))
        monkeypatch.setattr(copier, "PositionFeed", lambda *args, **kwargs: self.feed)
        failures = [KafkaException(KafkaError(KafkaError._TIMED_OUT))] * read_failures

        def read_bucket(*args):
            if failures:
                raise failures.pop()
            return BucketRecords(dict(stored), ())

        monkeypatch.setattr(copier, "read_bucket", read_bucket)
        runner = threading.Thread(target=self.copier.run, daemon=True)
        runner.start()
        runner.join(20)
        if runner.is_alive():  # stuck: stop it, and let the test's assertions say where
            self.copier.stop()
            runner.join(60)

    def metric(self, name: str, **labels: str) -> float | None:
        return self.metrics.registry.get_sample_value(name, {"route": ROUTE, **labels})

    def written(self) -> list[tuple[str, bytes | None, int | None]]:
        """What every committed transaction wrote: topic, value, partition."""
        return [(topic, value, partition) for done in self.producers[-1].committed
                for topic, _, value, partition in done]


def offsets_record(source: SourcePartition, next_offset: int) -> tuple[str, bytes, int]:
    return plan.route_topic(ROUTE), plan.offset_record(source.topic, source.partition, next_offset)[1], 0


def test_a_new_partition_is_stored_at_its_earliest_offset_then_copied_with_its_offset(monkeypatch) -> None:
    run = Run(monkeypatch, {T0: 5}, [[record(T0, 5)], [record(T1, 3, b"w")]], earliest={("t", 1): 3})
    assert run.written() == [("t", b"v", 0), offsets_record(T0, 6), offsets_record(T1, 3),
                             ("t", b"w", 1), offsets_record(T1, 4)]
    assert run.copier._state.phase is Phase.stopped and run.copier.error is None
    assert run.feed.last == {("t", 0): 6, ("t", 1): 4}
    assert run.metric("conveyor_replicate_records_total", topic="t", partition="1") == 1
    assert run.metric("conveyor_replicate_buckets_owned", worker="w", mode="exactly-once") == 0
    assert run.consumer.closed


def test_offsets_that_cannot_be_read_at_takeover_are_read_again_without_initializing_twice(monkeypatch,
                                                                                          caplog) -> None:
    """The destination fences the old owner, then does not answer the bucket's offsets: the fence
    stands, and the next try reads them (a second init_transactions would fail for good)."""
    run = Run(monkeypatch, {T0: 5, T1: 7}, [[record(T0, 5)]], read_failures=1)
    assert "takeover retried" in caplog.text  # the read did fail once
    assert len(run.producers) == 1 and run.copier.error is None
    assert run.written() == [("t", b"v", 0), offsets_record(T0, 6)]


def test_a_record_too_large_rewinds_the_batch_and_stops_only_its_partition(monkeypatch, caplog) -> None:
    caplog.set_level(logging.INFO, "conveyor.replicate.copier")
    run = Run(monkeypatch, {T0: 5, T1: 7}, [[record(T0, 5), record(T1, 7, b"x" * 2_000), record(T0, 6)]])
    assert run.written() == [] and run.producers[0].aborts == 1
    assert ("t", 0, 5) in run.consumer.seeks and ("t", 1, 7) in run.consumer.seeks
    assert set(run.consumer.assigned) == {("t", 0)}
    assert "t[1] offset 7: record too large for central" in caplog.text
    assert run.metric("conveyor_replicate_partition_stopped", topic="t", partition="1") == 1
    assert run.metric("conveyor_replicate_errors_total", kind="aborted") == 1


def test_a_gap_is_recorded_with_the_offset_past_it_and_copying_resumes_there(monkeypatch, caplog) -> None:
    run = Run(monkeypatch, {T0: 5, T1: 7}, [[out_of_range(T0, 5)]], bounds={("t", 0): (9, 20)})
    [gap, offset] = run.written()
    assert gap[0] == plan.route_topic(ROUTE) and plan.parse_gap_record(gap[1]) == plan.Gap("t", 0, 5, 8)
    assert offset == offsets_record(T0, 9)
    assert run.consumer.seeks == [("t", 0, 9)]
    assert "DATA LOST: t[0] offsets 5..8 (4 records)" in caplog.text
    assert run.metric("conveyor_replicate_gap_records_total", topic="t") == 4


@pytest.mark.parametrize(("bounds", "seek", "said"), [
    ((0, 3), 0, "t[0] offset 5 is beyond the source's end 3"),
    (KafkaException(KafkaError(KafkaError._TRANSPORT)), 5, "t[0] out of range at 5, and its offsets cannot be read"),
    ((2, 9), 5, None),
])
def test_out_of_range_without_a_gap_copies_on_without_recording_anything(monkeypatch, caplog, bounds, seek,
                                                                          said) -> None:
    run = Run(monkeypatch, {T0: 5, T1: 7}, [[out_of_range(T0, 5)]], bounds={("t", 0): bounds})
    assert run.written() == [] and run.consumer.seeks == [("t", 0, seek)]
    assert said is None or said in caplog.text


def test_fenced_during_commit_the_copier_stops_and_writes_nothing_more(monkeypatch, caplog) -> None:
    run = Run(monkeypatch, {T0: 5, T1: 7}, [[record(T0, 5)], [record(T0, 6)]],
              commit_errors=[KafkaError(KafkaError.PRODUCER_FENCED)])
    assert run.copier._state.phase is Phase.fenced and run.copier.error is None
    assert len(run.producers) == 1 and run.written() == [] and len(run.consumer.rounds) == 1
    assert "fenced by a newer owner; stopping" in caplog.text


def test_a_producer_whose_own_state_failed_is_replaced_and_the_bucket_taken_over_again(monkeypatch) -> None:
    run = Run(monkeypatch, {T0: 5, T1: 7}, [[record(T0, 5)], [record(T0, 5)]],
              commit_errors=[KafkaError(KafkaError.INVALID_TXN_STATE, fatal=True)])
    assert len(run.producers) == 2 and run.copier._state.phase is Phase.stopped
    assert run.written() == [("t", b"v", 0), offsets_record(T0, 6)]
    assert run.metric("conveyor_replicate_errors_total", kind="producer-restart") == 1


def test_a_commit_refused_for_good_fails_the_copier(monkeypatch) -> None:
    run = Run(monkeypatch, {T0: 5, T1: 7}, [[record(T0, 5)]],
              commit_errors=[KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)])
    assert run.copier._state.phase is Phase.failed and isinstance(run.copier.error, KafkaException)


def test_a_partition_whose_records_are_refused_twice_in_one_batch_is_stopped_once(monkeypatch, caplog) -> None:
    """The destination refuses a produce request for its size (a topic's max.message.bytes below the
    copier's batch): each record it held is reported refused."""
    run = Run(monkeypatch, {T0: 5, T1: 7}, [[record(T0, 5), record(T1, 7, b"big"), record(T1, 8, b"big")]],
              refuse=lambda value: KafkaError(KafkaError.MSG_SIZE_TOO_LARGE) if value == b"big" else None)
    assert run.copier.error is None and set(run.consumer.assigned) == {("t", 0)}
    assert caplog.text.count("record too large") == 1 and "t[1] offset 7: record too large" in caplog.text
