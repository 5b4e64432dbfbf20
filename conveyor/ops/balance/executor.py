"""Apply an :class:`~conveyor.ops.balance.execution.Execution` to its cluster, batch by batch.

For each batch: Kafka's reassignment tool starts the moves with the replication throttle set on
the brokers and topics involved; we poll topic metadata until every partition holds exactly its
new replicas and all of them are in sync; then the tool's ``--verify`` confirms completion and
removes the throttles. After the last batch, a preferred leader election (AdminClient
``elect_leaders``) hands leadership to each partition's new first replica.

The execution is saved to its state file before and after every step, so a run interrupted at
any point resumes where it stopped: a batch that was in flight is resubmitted (``--additional``)
for the partitions not yet moved. Before anything is done, and again on resume, the cluster is
compared with what the execution expects (:func:`~conveyor.ops.balance.execution.drift`) and a
changed cluster is refused.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Protocol

from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition

from conveyor import kafka
from conveyor.config import Platform
from conveyor.files import replace_atomically
from conveyor.ops.balance.errors import ExecutionError, StalePlanError
from conveyor.ops.balance.execution import Execution, drift
from conveyor.ops.balance.live import Metadata, read_metadata
from conveyor.kafka_tools import KafkaTools

#: Election errors worth another try: the new preferred leader is catching up or just joined.
_RETRY_ELECTION = {KafkaError.PREFERRED_LEADER_NOT_AVAILABLE, KafkaError.LEADER_NOT_AVAILABLE,
                   KafkaError.NOT_CONTROLLER, KafkaError.REQUEST_TIMED_OUT}


class Progress(Protocol):
    def batch(self, index: int, total: int, partitions: int, bytes_to_move: int) -> None: ...

    def moved(self, index: int, partitions_done: int) -> None: ...

    def note(self, message: str) -> None: ...


def state_path(platform: Platform, cluster: str) -> Path:
    return platform.home / "balance" / f"{cluster}.json"


def load_state(path: Path) -> Execution | None:
    return Execution.from_json(path.read_text()) if path.is_file() else None


def save_state(path: Path, execution: Execution) -> None:
    replace_atomically(path, execution.to_json().encode())


class Executor:
    def __init__(self, platform: Platform, cluster: str, state_file: Path | None = None,
                 tools: KafkaTools | None = None, poll_seconds: float = 1.0, batch_timeout: float = 3600.0) -> None:
        self.platform, self.cluster = platform, cluster
        self.state_file = state_file or state_path(platform, cluster)
        self.tools = tools or KafkaTools(platform, cluster)
        self.poll_seconds, self.batch_timeout = poll_seconds, batch_timeout
        self.admin = kafka.admin(platform, cluster)

    def metadata(self, execution: Execution) -> Metadata:
        return read_metadata(self.platform, self.cluster, self.admin, {t for t, _ in execution.before})

    def check(self, execution: Execution) -> None:
        """Refuse an execution whose cluster changed since it was planned (or last saved)."""
        found = drift(execution, self.metadata(execution).assignment())
        if found:
            raise StalePlanError(self.cluster, found)

    def run(self, execution: Execution, progress: Progress) -> Execution:
        if execution.cluster != self.cluster:
            raise ExecutionError(f"the plan is for cluster {execution.cluster}, not {self.cluster}")
        self.check(execution)
        save_state(self.state_file, execution)
        while execution.done < len(execution.batches):
            execution = self._batch(execution, progress)
            save_state(self.state_file, execution)
        if not execution.elected:
            self._elect(execution, progress)
            execution = execution.completed_elections()
            save_state(self.state_file, execution)
        return execution

    def _batch(self, execution: Execution, progress: Progress) -> Execution:
        index = execution.done
        batch = execution.batch(index)
        progress.batch(index, len(execution.batches), len(batch), execution.batch_bytes(index))
        if execution.in_flight:
            current = self.metadata(execution).assignment()
            pending = {tp: r for tp, r in batch.items() if current.get(tp) != r}
            if pending:
                progress.note(f"batch {index + 1} was interrupted: resubmitting {len(pending)} partition(s)")
                self.tools.reassign_execute(pending, execution.throttle, additional=True)
        else:
            execution = execution.started()
            save_state(self.state_file, execution)
            self.tools.reassign_execute(batch, execution.throttle)
        deadline = time.monotonic() + self.batch_timeout
        while True:
            partitions = self.metadata(execution).partitions
            done = sum(1 for tp, target in batch.items() if tp in partitions
                       and partitions[tp].replicas == target and set(partitions[tp].isr) >= set(target))
            progress.moved(index, done)
            # --verify is a JVM start: only once metadata says the batch is through.
            if done == len(batch) and self.tools.reassign_verify(batch).done:
                return execution.completed_batch()
            if time.monotonic() > deadline:
                raise ExecutionError(
                    f"batch {index + 1} of {len(execution.batches)} did not complete within {self.batch_timeout:.0f} s "
                    f"({done}/{len(batch)} partitions in sync); its moves continue in Kafka with the throttle set. "
                    "Run `conveyor balance execute` again to keep waiting.")
            time.sleep(self.poll_seconds)

    def _elect(self, execution: Execution, progress: Progress, attempts: int = 10) -> None:
        wanted = set(execution.elections) | set(execution.target)
        for attempt in range(attempts):
            partitions = self.metadata(execution).partitions
            todo = sorted(tp for tp in wanted if tp in partitions and partitions[tp].replicas
                          and partitions[tp].leader != partitions[tp].replicas[0])
            if not todo:
                return
            progress.note(f"preferred leader election for {len(todo)} partition(s)")
            try:
                results = self.admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(t, p) for t, p in todo]) \
                    .result(timeout=30)
            except KafkaException as exc:
                failures = {str(exc.args[0] if exc.args else exc)}
            else:
                failures = {f"{tp.topic}-{tp.partition}: {error.str()}" for tp, error in results.items()
                            if error is not None and error.code() != KafkaError.ELECTION_NOT_NEEDED
                            and error.code() not in _RETRY_ELECTION}
            if failures:
                raise ExecutionError("preferred leader election failed: " + "; ".join(sorted(failures)[:5]))
            time.sleep(min(0.5 * (attempt + 1), 3.0))
        raise ExecutionError(f"preferred leaders did not take over after {attempts} elections; "
                             "run `conveyor balance execute` again to retry")
