"""bench.jfr_profile: a sample counts for the most specific work on its stack, and a thread that
runs no Spark task counts as the driver's."""

from __future__ import annotations

from bench.jfr_profile import DRIVER, OTHER_TASK, category

TASK = "Executor task launch worker for task 3.0 in stage 16.0 (TID 40)"


def test_the_running_frame_decides_before_the_frames_below_it() -> None:
    writing = ["org.apache.iceberg.shaded.org.apache.parquet.io.api.Binary.hashCode()",
               "org.apache.iceberg.spark.source.SparkWrite$UnpartitionedDataWriter.write(InternalRow)",
               "org.apache.spark.sql.kafka010.KafkaBatchPartitionReader.next()"]
    assert category(TASK, writing) == "Parquet encoding and writing"
    assert category(TASK, writing[2:]) == "Kafka fetch and record decoding"


def test_unknown_task_work_and_the_driver_are_counted_apart() -> None:
    copying = ["org.apache.spark.unsafe.Platform.copyMemory(Object, long, Object, long, long)"]
    assert category(TASK, copying) == OTHER_TASK
    assert category("Thread-12", ["org.apache.spark.sql.catalyst.json.JacksonParser.parse()"]) == DRIVER
