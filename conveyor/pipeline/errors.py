"""Errors of the pipelines. The CLI prints them as one message; exit statuses are in cli.lake_cmd."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from conveyor.errors import ConveyorError


class PipelineError(ConveyorError):
    """A pipeline cannot run or could not finish; nothing half-done is visible in the lake."""


class SparkSetupError(PipelineError):
    """Spark cannot start as the pipelines need it (wrong PySpark, another session's warehouse)."""


class LakeConfigError(PipelineError):
    """platform.yaml does not say enough to land a topic (no source cluster, no contract)."""


class OffsetsAheadError(PipelineError):
    """The lake has landed offsets a partition no longer has: the topic was deleted and re-created,
    or the log was truncated. Landing on would mix two histories, so the run refuses."""

    def __init__(self, topic: str, partition: int, stored: int, end: int) -> None:
        super().__init__(
            f"{topic}[{partition}]: the lake has landed up to offset {stored} but the partition ends "
            f"at {end}; was the topic re-created? Move the table aside to start it again."
        )
        self.topic = topic
        self.partition = partition
        self.stored = stored
        self.end = end


class RunFailedError(PipelineError):
    """Spark failed during a run; the run's commit did not happen, the next run redoes its range."""


class LakeConflictError(RunFailedError):
    """Another run committed to the table after this run read its positions: this run's commit did
    not happen. The run reads the positions again and retries (pipeline.lake.commit_attempts)."""


@contextmanager
def spark_failures(what: str) -> Iterator[None]:
    """Turn a failure inside Spark (JVM or Python worker) into a RunFailedError with its first line."""
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    try:
        yield
    except (PySparkException, Py4JError) as err:
        java = getattr(err, "java_exception", None)  # Py4J's own text only names the call that failed
        text = str(java.toString() if java is not None else err).strip()
        first = text.splitlines()[0][:500] if text else type(err).__name__
        raise RunFailedError(f"{what}: Spark failed: {first}") from err
