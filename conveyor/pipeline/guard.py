"""One writer at a time, and the clean-up after a writer that was killed.

The lock is taken by the Spark driver's JVM, not by Python: the JVM is what commits, and a JVM can
outlive its Python process for a moment (it exits when its stdin closes). While it lives it holds
the lock, so the next run can never commit beside a dying one. Java's file locks are POSIX record
locks, released by the kernel when the process dies, however it dies.

A run marks each topic it works on and clears the mark after the topic's last commit. A mark found
at the start of a run means a run died there: its data files, written but never committed, are
deleted (Iceberg's orphan-file action; safe with no other writer, which the lock guarantees).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conveyor.config import Platform
from conveyor.pipeline.errors import LakeBusyError
from conveyor.pipeline.catalog import local_warehouse

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def state_dir(platform: Platform) -> Path:
    """Beside the tables when the warehouse is a local folder, else under the runtime home."""
    warehouse = local_warehouse(platform)
    folder = warehouse / ".conveyor" if warehouse is not None else platform.home / "lake"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


class WarehouseLock:
    """An exclusive lock on the warehouse, held by the JVM of ``spark``."""

    def __init__(self, spark: SparkSession, path: Path) -> None:
        self._spark = spark
        self._path = path
        self._file: Any = None
        self._lock: Any = None

    def acquire(self, timeout: float) -> None:
        jvm = self._spark.sparkContext._jvm
        self._file = jvm.java.io.RandomAccessFile(str(self._path), "rw")
        deadline = time.monotonic() + timeout
        while True:
            self._lock = self._file.getChannel().tryLock()
            if self._lock is not None:
                return
            if time.monotonic() >= deadline:
                self._file.close()
                raise LakeBusyError(f"another lake run holds {self._path} (waited {timeout:.0f}s)")
            time.sleep(1.0)

    def release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._file.close()
            self._lock = self._file = None

    def __enter__(self) -> WarehouseLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _marker(platform: Platform, topic: str) -> Path:
    return state_dir(platform) / "running" / topic


def interrupted(platform: Platform, topic: str) -> bool:
    """True when a run died while landing ``topic``."""
    return _marker(platform, topic).exists()


def mark_running(platform: Platform, topic: str, run_id: str) -> None:
    marker = _marker(platform, topic)
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(run_id)


def clear_running(platform: Platform, topic: str) -> None:
    _marker(platform, topic).unlink(missing_ok=True)


def delete_orphans(spark: SparkSession, table: str) -> int:
    """Delete the files under ``table`` that no snapshot references; returns how many."""
    jvm = spark.sparkContext._jvm
    session = spark._jsparkSession
    iceberg_table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(session, table)
    action = jvm.org.apache.iceberg.spark.actions.SparkActions.get(session).deleteOrphanFiles(iceberg_table)
    # Every file older than now: no other writer exists while the lock is held.
    result = action.olderThan(int(time.time() * 1000) + 1).execute()
    return sum(1 for _ in result.orphanFileLocations())
