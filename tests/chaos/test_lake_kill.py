"""Exactly-once under SIGKILL: while events keep arriving, the lake job (its own process with its
Spark driver) is killed at random points, then run again; at the end the table holds exactly the
produced events, each once, and no file of a killed run is left behind.

CONVEYOR_LAKE_CHAOS_RUNS sets the number of killed runs (default 2; the issue's full count is 20).
De-duplication by event_id is off here, so only the offsets committed with the data can keep the
count exact.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pytest

from conveyor import kafka
from conveyor.pipeline.lake import run_once
from conveyor.pipeline.catalog import local_warehouse
from conveyor.pipeline.tables import data_table, quarantine_table
from tests.conftest import demo_event
from tests.lakekit import lake_case, lake_folder, lake_spark, quarantine_of, rows_of  # noqa: F401

pytestmark = pytest.mark.chaos

RUNS = int(os.environ.get("CONVEYOR_LAKE_CHAOS_RUNS", "2"))
#: Every this many events, one record that is not JSON, so the quarantine commit is killed too.
BAD_EVERY = 25


class Traffic:
    """Produces events to central until stopped; remembers every acknowledged one."""

    def __init__(self, case) -> None:
        self.case = case
        self.good: list[str] = []
        self.bad: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, err, message) -> None:
        assert err is None, err
        value = message.value()
        if value.startswith(b"broken-"):
            self.bad.append(value)
        else:
            self.good.append(orjson.loads(value)["event_id"])

    def _run(self) -> None:
        producer = kafka.producer(self.case.platform, "central", "lake-chaos-traffic")
        n = 0
        while not self._stop.is_set():
            for i in range(BAD_EVERY):
                event = demo_event(user_id=f"user-{n + i}")
                producer.produce(self.case.topic, orjson.dumps(event), key=event["user_id"].encode(),
                                 on_delivery=self._delivered)
            producer.produce(self.case.topic, f"broken-{n}".encode(), on_delivery=self._delivered)
            producer.poll(0)
            n += BAD_EVERY
            self._stop.wait(0.05)
        assert producer.flush(60) == 0

    def __enter__(self) -> Traffic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(90)
        assert not self._thread.is_alive()


def _lake_process(path: Path, log: Path) -> subprocess.Popen:
    with log.open("ab") as out:
        # Its own session: the kill takes the Python driver and its JVM together, as a lost machine would.
        return subprocess.Popen(
            [sys.executable, "-m", "conveyor", "pipeline", "lake", "--once", "--platform", str(path)],
            stdout=out, stderr=out, start_new_session=True,
        )


def _files_under(folder: Path) -> set[str]:
    return {str(p) for p in folder.rglob("*.parquet")}


def test_killed_runs_land_every_event_exactly_once(lake_spark, lake_case, tmp_path):
    # One writer here: files of a killed run may go at once (orphan_age 0s), and must.
    case = lake_case(partitions=3, dedup_window="0s", orphan_age="0s")
    seed = int(os.environ.get("CONVEYOR_CHAOS_SEED", time.time_ns() % 1_000_000))
    rng = random.Random(seed)
    log = tmp_path / "lake-runs.log"
    outcomes = []
    with Traffic(case) as traffic:
        # One full run measures how long a run takes, so the kills fall inside runs. A run that
        # finishes before its kill is not counted, and the next kills aim within its shorter time.
        started = time.monotonic()
        assert _lake_process(case.path, log).wait(600) == 0, log.read_text()[-3000:]
        duration = time.monotonic() - started
        killed = 0
        while killed < RUNS:
            assert len(outcomes) < 3 * RUNS, f"runs keep finishing before their kill: {outcomes}"
            started = time.monotonic()
            process = _lake_process(case.path, log)
            delay = rng.uniform(0.3 * duration, duration)
            try:
                outcomes.append(("finished", process.wait(timeout=delay)))
                duration = time.monotonic() - started
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                outcomes.append(("killed", round(delay, 1)))
                killed += 1
    assert all(rc == 0 for kind, rc in outcomes if kind == "finished"), (outcomes, log.read_text()[-3000:])
    print(f"seed {seed}: {killed} runs killed, {len(outcomes) - killed} finished before their kill")

    final = run_once(lake_spark, case.platform).topics[0]
    assert final.lost == 0
    landed = [r.event_id for r in rows_of(lake_spark, case.topic)]
    context = f"seed {seed}, runs {outcomes}"
    assert len(landed) == len(traffic.good), context
    assert set(landed) == set(traffic.good), context
    assert sorted(bytes(q.raw_value) for q in quarantine_of(lake_spark, case.topic)) == sorted(traffic.bad), context

    # Every data file on disk belongs to the table: what killed runs wrote was deleted.
    warehouse = local_warehouse(case.platform)
    assert warehouse is not None
    for table, folder in ((data_table(case.topic), "events"), (quarantine_table(case.topic), "quarantine")):
        files = lake_spark.sql(f"SELECT file_path FROM {table}.all_data_files").collect()
        referenced = {r.file_path.removeprefix("file:") for r in files}
        on_disk = _files_under(warehouse / folder / case.topic / "data")
        assert on_disk == referenced, (table, sorted(on_disk - referenced), context)
