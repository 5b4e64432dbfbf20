"""Where a Spark JVM's CPU goes, from Java Flight Recorder: recordings around the measured runs of a
bench (:func:`recording`, ``--jfr DIR`` of bench.lake_ingest), and a summary of their execution
samples by the work each stands in (``python -m bench.jfr_profile FILE.jfr...``).

JFR samples the threads running Java code every 10 ms (the JDK's "profile" settings); time in
native code (compression, the kernel) and the garbage collector is not in these samples, so the
shares are of the Java work. A sample counts for the first of the categories below found walking
its stack from the running frame down: the most specific work it was doing. Samples of threads
that run no task (Spark's driver: planning, commits, the catalog) are counted apart.
"""

from __future__ import annotations

import argparse
import re
import subprocess
from collections import Counter
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

#: (category, markers): a frame that contains any marker is that category's work.
CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("JSON parse (from_json)", ("JsonToStructs", "JacksonParser", "com.fasterxml.jackson", "CreateJacksonParser",
                                "sun.nio.cs")),
    ("Parquet encoding and writing", ("org.apache.iceberg.shaded.org.apache.parquet", "org.apache.iceberg.parquet",
                                      "org.apache.iceberg.io", "org.apache.iceberg.spark.source.SparkWrite",
                                      "org.apache.iceberg.data")),
    ("Kafka fetch and record decoding", ("org.apache.spark.sql.kafka010", "org.apache.kafka")),
    ("times and integers: regex, upper case, casts", ("java.util.regex", "stringToTimestamp", "parseTimestampString",
                                                      "toUpperCase", "RLike")),
    ("headers: filter and exists", ("ArrayFilter", "ArrayExists", "toInternalRowWithHeaders")),
    ("de-duplication: sort, window, read back", ("Sorter", "WindowExec", "SortExec", "UnsafeSortDataFormat",
                                                 "Vectorized", "ShuffleBlockFetcher")),
    ("shuffle write", ("ShuffleWriter", "ShuffleExternalSorter")),
    ("observed counts", ("CollectMetrics", "AggregatingAccumulator")),
)
OTHER_TASK = "other task work (row copies, projections)"
DRIVER = "no task (driver: planning, commits, catalog)"
_TASK_THREAD = "Executor task launch"


@contextmanager
def recording(pid: int, path: Path) -> Iterator[None]:
    """A JFR recording of JVM ``pid`` while the block runs, written to ``path``."""
    name = path.stem
    subprocess.run(["jcmd", str(pid), "JFR.start", f"name={name}", "settings=profile"], check=True,
                   capture_output=True)
    try:
        yield
    finally:
        subprocess.run(["jcmd", str(pid), "JFR.stop", f"name={name}", f"filename={path}"], check=True,
                       capture_output=True)


def spark_recording(spark: Any, folder: Path | None, file: str) -> AbstractContextManager[None]:
    """:func:`recording` of the JVM of ``spark`` (a SparkSession) into ``folder``/``file``; none
    when ``folder`` is None."""
    if folder is None:
        return nullcontext()
    folder.mkdir(parents=True, exist_ok=True)
    return recording(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid(), folder / file)


def samples(path: Path) -> Iterator[tuple[str, list[str]]]:
    """Each execution sample's thread name and stack, the running frame first."""
    text = subprocess.run(["jfr", "print", "--events", "jdk.ExecutionSample", "--stack-depth", "200", str(path)],
                          capture_output=True, text=True, check=True).stdout
    for block in text.split("jdk.ExecutionSample {")[1:]:
        thread = re.search(r'sampledThread = "(.*?)"', block)
        stack = re.search(r"stackTrace = \[(.*?)\n\s*\]", block, re.S)
        lines = stack.group(1).strip().splitlines() if stack else []
        frames = [re.sub(r"\s+line:.*", "", line.strip()) for line in lines if line.strip() not in ("", "...")]
        yield (thread.group(1) if thread else ""), frames


def category(thread: str, frames: list[str]) -> str:
    if _TASK_THREAD not in thread:
        return DRIVER
    for frame in frames:
        for name, markers in CATEGORIES:
            if any(marker in frame for marker in markers):
                return name
    return OTHER_TASK


def summary(path: Path) -> Counter[str]:
    return Counter(category(thread, frames) for thread, frames in samples(path))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("recordings", nargs="+", type=Path, help="JFR files, shown side by side")
    args = parser.parse_args()
    counts = [summary(path) for path in args.recordings]
    table = Table(title="execution samples by work (share of each recording's samples)")
    table.add_column("work")
    for path in args.recordings:
        table.add_column(path.name, justify="right")
    for name in [*(name for name, _ in CATEGORIES), OTHER_TASK, DRIVER, "total"]:
        cells = []
        for counted in counts:
            total = sum(counted.values()) or 1
            n = total if name == "total" else counted[name]
            cells.append(f"{n:,}" if name == "total" else f"{n:,} ({100 * n / total:.1f} %)")
        table.add_row(name, *cells)
    Console(width=160).print(table)


if __name__ == "__main__":
    main()
