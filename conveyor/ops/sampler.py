"""One sampling round of a cluster: consumer groups, their committed offsets, end and start offsets.

Batched so that watching 2,000 topics costs the brokers a handful of requests per round, not one
per partition: one Metadata request for every topic, one ListGroups, one OffsetFetch per group
(librdkafka's AdminClient takes a single group per call; every group's call is in flight at once,
up to ``concurrency``), and two ListOffsets calls (latest and earliest) for every watched
partition at once, which librdkafka splits into one request per partition leader. A per-partition
``get_watermark_offsets`` would be one round trip per partition.

Committed offsets are read before end offsets: a healthy group then always has committed <= end,
so anything else the lag rules see is a real error (``conveyor.ops.lag``).

The watcher runs each cluster's sampler in a child process (:class:`SamplerProcess`): librdkafka's
group admin calls can kill the whole process when a broker restarts (librdkafka issue #5040, a
SIGSEGV when a moved coordinator answers an OffsetFetch with NOT_COORDINATOR), which is exactly
when operators need the watcher. Elsewhere commits are read with :func:`conveyor.kafka.committed`,
which avoids it. In a child, a crash costs one round of one cluster, reported as a sampling
failure, and the next round starts a new child. The other such abort, librdkafka issue #4605,
is avoided as everywhere: an OffsetFetch gets librdkafka's long coordinator timeout
(:data:`conveyor.kafka.COORDINATOR_REQUEST_TIMEOUT`) and the round bounds its own wait.
"""

from __future__ import annotations

import os
import pickle
import select
import subprocess
import sys
import time
from collections.abc import Collection
from concurrent.futures import Future

from confluent_kafka import ConsumerGroupTopicPartitions, ConsumerGroupType, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from conveyor import kafka
from conveyor.config import Platform
from conveyor.ops.errors import SampleError
from conveyor.ops.tracker import GroupOffsets, OffsetSnapshot, PartitionMeta
from conveyor.positions import client_ids, kept_in

_TYPES = {ConsumerGroupType.CONSUMER, ConsumerGroupType.CLASSIC}


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, KafkaException) and exc.args:
        error = exc.args[0]
        return f"{error.name()}: {error.str()}" if hasattr(error, "name") else str(error)
    return str(exc)


class OffsetSampler:
    """Samples one cluster; constructing it does no I/O, the admin client is made on first use."""

    def __init__(self, platform: Platform, cluster: str, timeout: float = 10.0, concurrency: int = 64) -> None:
        self.platform = platform
        self.cluster = cluster
        self.timeout = timeout
        self.concurrency = concurrency
        self._admin: AdminClient | None = None

    @property
    def admin(self) -> AdminClient:
        if self._admin is None:
            # A hung broker (stalled, paused) keeps its connection open and answers nothing, and
            # librdkafka sends each metadata request to the broker it sent to last: the hung one,
            # round after round, until its own request timeout (60 s) closes the connection. A
            # request unanswered within a round closes it now, and the next round asks another.
            wait = int(self.timeout * 1000)
            self._admin = kafka.admin(self.platform, self.cluster, {"socket.timeout.ms": wait,
                                                                    "socket.connection.setup.timeout.ms": wait})
        return self._admin

    def sample(self, tracked_topics: Collection[str] = ()) -> OffsetSnapshot:
        """One round. ``tracked_topics``: topics whose end offsets are needed even when no group
        has a commit on them right now (a lost commit must still be judged)."""
        calls = {"metadata": 1, "list_groups": 1, "offset_fetch": 0, "list_offsets": 0}
        errors: list[str] = []
        try:
            metadata = self.admin.list_topics(timeout=self.timeout)
            listing = self.admin.list_consumer_groups(request_timeout=self.timeout, types=_TYPES).result()
        except KafkaException as exc:
            raise SampleError(self.cluster, _error_text(exc)) from None
        errors += [_error_text(e) for e in listing.errors]
        partitions = {
            (name, number): PartitionMeta(meta.leader, tuple(meta.replicas), tuple(meta.isrs))
            for name, topic in metadata.topics.items() if not name.startswith("__") and topic.error is None
            for number, meta in topic.partitions.items()
        }
        listings = sorted(listing.valid, key=lambda g: g.group_id)
        groups = []
        for start in range(0, len(listings), self.concurrency):
            chunk = listings[start:start + self.concurrency]
            futures = {g.group_id: self._offsets(g.group_id) for g in chunk}
            calls["offset_fetch"] += len(chunk)
            deadline = time.monotonic() + self.timeout
            groups += [self._group_offsets(g.group_id, g.state.name, futures[g.group_id], deadline) for g in chunk]

        topics = {tp[0] for g in groups for tp in (g.committed or {})} | set(tracked_topics)
        watched = [TopicPartition(t, p) for t, p in sorted(partitions) if t in topics]
        ends = self._list_offsets(watched, OffsetSpec.latest(), errors) if watched else {}
        at_ms = time.time_ns() // 1_000_000
        log_starts = self._list_offsets(watched, OffsetSpec.earliest(), errors) if watched else {}
        calls["list_offsets"] = 2 if watched else 0
        return OffsetSnapshot(self.cluster, at_ms, tuple(groups), partitions, ends, log_starts, calls, tuple(errors))

    def _offsets(self, group: str) -> Future:
        request = [ConsumerGroupTopicPartitions(group)]
        return self.admin.list_consumer_group_offsets(request, request_timeout=kafka.COORDINATOR_REQUEST_TIMEOUT)[group]

    def _group_offsets(self, group: str, state: str, future: Future, deadline: float) -> GroupOffsets:
        try:
            result = kafka.answer(future, deadline - time.monotonic())
        except KafkaException as exc:
            return GroupOffsets(group, state, None, _error_text(exc))
        kept = [tp for tp in result.topic_partitions
                if tp.error is None and tp.offset >= 0 and not tp.topic.startswith("__")]
        committed = {(tp.topic, tp.partition): tp.offset for tp in kept}
        readers = {(tp.topic, tp.partition): ids for tp in kept if (ids := client_ids(tp.metadata))}
        return GroupOffsets(group, state, committed, kept_in=next(
            (store for store in (kept_in(tp.metadata) for tp in kept) if store), None), readers=readers)

    def _list_offsets(self, partitions: list[TopicPartition], spec: OffsetSpec,
                      errors: list[str]) -> dict[tuple[str, int], int]:
        futures = self.admin.list_offsets({tp: spec for tp in partitions}, request_timeout=self.timeout)
        offsets = {}
        failed = 0
        for tp, future in futures.items():
            try:
                offset = future.result().offset
            except KafkaException:
                offset = -1
            if offset >= 0:
                offsets[(tp.topic, tp.partition)] = offset
            else:
                failed += 1  # no leader right now (an error, or OFFSET_INVALID): that window gets no sample
        if failed:
            errors.append(f"{failed} partition(s) did not answer ListOffsets (no leader?)")
        return offsets



def _serve_stdio() -> None:
    """The child's loop (``python -m conveyor.ops.sampler``): pickled (platform, cluster, timeout) on
    stdin, then per round a sorted list of tracked topics in and ("ok", snapshot) or ("error", text)
    out. Its stdout carries only the answers: anything else written to fd 1 goes to stderr."""
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    requests = sys.stdin.buffer
    platform, cluster, timeout = pickle.load(requests)
    sampler = OffsetSampler(platform, cluster, timeout)
    while True:
        try:
            tracked = pickle.load(requests)
        except EOFError:  # the watcher closed the pipe or is gone
            return
        try:
            answer: tuple[str, object] = ("ok", sampler.sample(tracked))
        except SampleError as exc:
            answer = ("error", str(exc))
        pickle.dump(answer, answers, protocol=pickle.HIGHEST_PROTOCOL)
        answers.flush()


class _Died(Exception):
    """The sampler's child process ended mid-round."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class SamplerProcess:
    """:class:`OffsetSampler` in a child process, started on first use and again after it died.

    A plain subprocess rather than multiprocessing: spawning re-runs the parent's main module
    (``python -m conveyor`` would start the CLI again), and forking copies librdkafka's threads'
    locks mid-use."""

    def __init__(self, platform: Platform, cluster: str, timeout: float = 10.0) -> None:
        self.platform = platform
        self.cluster = cluster
        self.timeout = timeout
        self._process: subprocess.Popen[bytes] | None = None

    def _start(self) -> subprocess.Popen[bytes]:
        process = subprocess.Popen([sys.executable, "-m", "conveyor.ops.sampler"], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE)
        assert process.stdin is not None
        pickle.dump((self.platform, self.cluster, self.timeout), process.stdin)
        self._process = process
        return process

    def sample(self, tracked_topics: Collection[str] = ()) -> OffsetSnapshot:
        """One round. A child that dies mid-round (librdkafka aborts the process when a broker
        restarts during an admin call) is replaced and the round asked of the new one, once: a
        one-shot command then answers, and a second death is the round's error."""
        for attempt in (1, 2):
            try:
                return self._ask(tracked_topics)
            except _Died as died:
                if attempt == 2:
                    raise SampleError(self.cluster, f"the sampler process died twice in a row (exit code "
                                                    f"{died.code}); librdkafka aborts like this when a broker "
                                                    "restarts during an admin call, the next round starts a new "
                                                    "one") from None
        raise AssertionError("unreachable: the second attempt returns or raises")

    def _ask(self, tracked_topics: Collection[str]) -> OffsetSnapshot:
        process = self._process if self._process is not None and self._process.poll() is None else self._start()
        assert process.stdin is not None and process.stdout is not None
        # A round waits on at most a few request timeouts; a first round also imports and connects.
        patience = 4 * self.timeout + 60
        try:
            pickle.dump(sorted(tracked_topics), process.stdin)
            process.stdin.flush()
            if not select.select([process.stdout], [], [], patience)[0]:
                self.close()
                raise SampleError(self.cluster, f"the sampler process did not answer within {patience:.0f} s")
            kind, result = pickle.load(process.stdout)
        except (EOFError, OSError, pickle.UnpicklingError):
            code = process.wait(10)
            self.close()
            raise _Died(code) from None
        if kind == "error":
            raise SampleError(self.cluster, str(result).removeprefix(f"sampling cluster {self.cluster} failed: "))
        snapshot: OffsetSnapshot = result
        return snapshot

    @property
    def pid(self) -> int | None:
        """The child's process id while it runs."""
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    def close(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()  # the child's stdin reaches EOF and it returns
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


if __name__ == "__main__":
    _serve_stdio()
