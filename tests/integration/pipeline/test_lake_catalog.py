"""The lake on a shared catalog: Iceberg's JDBC catalog on a real PostgreSQL (Debian's package,
started by the runtime's own code), written by lake runs that race each other from separate local
folders, read back by a second client (pyiceberg's SQL catalog), with the status and the audit
read through the same catalog. The racing runs write to object storage (an S3 API, moto's server,
through Iceberg's S3FileIO); two runs racing on a local-folder warehouse are the system test's
(tests/system/test_promise.py), under faults.

CONVEYOR_LAKE_RACE_RUNS sets how many times two runs race (default 1; the issue's full count is 10);
CONVEYOR_TEST_POSTGRES_PORT the server's port (default: runtime.base_port - 2).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conveyor.config import load_resolved_platform
from conveyor.config.resolved import RESOLVED_VIEW_FILE
from conveyor.runtime.postgres import PostgresLayout
from tests.conftest import demo_event, platform_variant
from tests.s3kit import s3_server  # noqa: F401
from conveyor.pipeline.lake import run_once
from conveyor.pipeline.tables import current_commit, data_table
from tests.lakekit import (  # noqa: F401
    lake_case,
    lake_data,
    lake_folder,
    lake_spark,
    lake_database,
    postgres_server,
    racing_run,
    produce,
    read_back,
    rows_of,
)

pytestmark = pytest.mark.integration

RACES = int(os.environ.get("CONVEYOR_LAKE_RACE_RUNS", "1"))

#: What `conveyor lake status` and `conveyor lake audit` compute, in one Spark session.
_STATUS_AND_AUDIT = """
import json, sys
from dataclasses import asdict
from conveyor.config import load_resolved_platform
from conveyor.pipeline.audit import audit_lake
from conveyor.pipeline.spark import spark_session
from conveyor.pipeline.status import lake_status
platform = load_resolved_platform(sys.argv[1])
spark = spark_session(platform, "catalog-test")
report = {"status": [asdict(s) for s in lake_status(spark, platform)],
          "audit": [asdict(h) for h in audit_lake(spark, platform)]}
print(json.dumps(report, default=str))
"""


def _platform_files(platform_data: dict[str, Any], platform_file: Path, folder: Path, topic: str,
                    server: PostgresLayout, warehouse: str, options: dict[str, str]) -> list[Path]:
    """Two platform files of one lake on the JDBC catalog, each with its own runtime home (the
    local state folders of two hosts)."""
    paths = []
    for host in ("host-a", "host-b"):
        data = lake_data(platform_data, platform_file, folder, topic, 3, {})  # de-dup at its default
        data["runtime"]["home"] = str(folder / host)
        data["pipeline"]["catalog"] = {"type": "jdbc", "uri": server.url, "warehouse": warehouse,
                                       "options": {"jdbc.user": server.user, **options}}
        # A host of its own knows the clusters and holds the platform's credentials too: the view
        # `conveyor up` wrote on this one, as a deployment's platform.yaml would say it.
        (folder / host).mkdir()
        shutil.copy(Path(platform_data["runtime"]["home"]) / RESOLVED_VIEW_FILE, folder / host / RESOLVED_VIEW_FILE)
        path = folder / f"{host}.yaml"
        platform_variant(data, path)
        paths.append(path)
    return paths


def test_racing_runs_on_the_jdbc_catalog_and_object_storage_land_each_event_once_for_any_reader(
    platform_data, platform_file, lake_database, s3_server, topic_factory, provisioned, tmp_path
):
    topic = topic_factory("central", 3)
    s3 = s3_server
    warehouse, options, reader = s3.warehouse(topic), s3.catalog_options(), s3.reader_properties()
    paths = _platform_files(platform_data, platform_file, tmp_path, topic, lake_database, warehouse, options)
    platform = load_resolved_platform(paths[0])
    seed = int(os.environ.get("CONVEYOR_CHAOS_SEED", time.time_ns() % 1_000_000))
    rng = random.Random(seed)
    log = tmp_path / "runs.log"
    sent: list[str] = []
    lost = 0
    for race in range(RACES):
        events = [demo_event(user_id=f"user-{rng.randrange(1000)}") for _ in range(rng.randint(40, 120))]
        # A producer's retries: copies within the range, which each run's de-dup deletes.
        produce(platform, topic, events + rng.sample(events, 3))
        sent += [e["event_id"] for e in events]
        barrier = tmp_path / f"barrier-{race}"
        barrier.mkdir()
        runs = [racing_run(path, barrier, len(paths), log) for path in paths]  # each with its own folder
        codes = [run.wait(600) for run in runs]
        context = f"seed {seed}, race {race + 1}/{RACES}"
        assert codes == [0, 0], (context, log.read_text()[-4000:])
        landed, lost, lineage = read_back(lake_database, warehouse, topic, reader)
        assert len(landed) == len(sent), (context, lineage, log.read_text()[-6000:])
        assert sorted(landed) == sorted(sent), context
    print(f"seed {seed}: {RACES} race(s), {lost} commit(s) of the rows lost to the other run and redone")
    # The fault happened: a run's commit was refused (its snapshots are off main) and it landed again.
    assert lost > 0, (f"seed {seed}: no commit was lost to the other run; the runs never raced", log.read_text()[-4000:])
    # The tables are in the bucket, and nothing of them on a local disk.
    assert any(key.endswith(".parquet") for key in s3.keys(f"{topic}/"))
    assert not list(tmp_path.rglob("*.parquet"))

    done = subprocess.run([sys.executable, "-c", _STATUS_AND_AUDIT, str(paths[1])], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    (status,) = report["status"]
    assert (status["topic"], status["rows"], status["pending"], status["lost"]) == (topic, len(sent), 0, 0)
    assert status["last_run"] is not None
    hours = [h for h in report["audit"] if h["topic"] == topic]
    assert sum(h["landed"] for h in hours) == len(sent)
    assert sum(h["distinct"] for h in hours) == len(sent)


@pytest.mark.parametrize("dedup_window", ["0s", None], ids=["de-dup-off-the-offsets-alone-keep-it-exact",
                                                          "de-dup-at-its-default-with-a-copy-in-the-range"])
def test_a_run_whose_commit_another_run_wins_lands_only_what_is_still_missing(lake_spark, lake_case, dedup_window):
    """Deterministic race: a second run lands the range while the first is between reading its
    positions and committing; the first run's commit is refused, it re-reads the positions and
    lands only the events that arrived after the second run listed the partitions. With de-dup on,
    the winner's commit is an append and the delete of its copy, and the loser must find the
    winner's offsets behind that delete, not land the range again on top."""
    case = lake_case(partitions=2, **({"dedup_window": dedup_window} if dedup_window else {}))
    first = [demo_event() for _ in range(30)]
    copies = 0 if dedup_window else 1
    produce(case.platform, case.topic, first + first[:copies])
    later = [demo_event() for _ in range(7)]
    raced, steps = [], []

    def race(topic: str, step: str) -> None:
        steps.append(step)
        if step.startswith("reading") and not raced:  # positions read, nothing committed yet
            raced.append(run_once(lake_spark, case.platform))
            produce(case.platform, case.topic, later)

    summary = run_once(lake_spark, case.platform, step=race)
    (winner,) = raced
    assert (winner.topics[0].landed, winner.topics[0].duplicates_dropped) == (30, copies)
    assert (summary.topics[0].landed, summary.topics[0].duplicates_dropped) == (7, 0)
    # The loser says why its commit was refused, in Iceberg's words (the Java exception and its message).
    (refused,) = [s for s in steps if "again from the new positions" in s]
    assert re.search(r"\b(java\.lang|org\.apache\.iceberg\.exceptions)\.\w+Exception: \w", refused), refused
    landed = [r.event_id for r in rows_of(lake_spark, case.topic)]
    assert sorted(landed) == sorted(e["event_id"] for e in first + later)
    # The loser's refused commits are off main: written, never visible.
    table = data_table(case.topic)
    snapshots = {r.snapshot_id for r in lake_spark.sql(f"SELECT snapshot_id FROM {table}.snapshots").collect()}
    main = {r.snapshot_id for r in lake_spark.sql(f"SELECT snapshot_id FROM {table}.history WHERE is_current_ancestor")
            .collect()}
    assert len(snapshots - main) >= 1
    assert current_commit(lake_spark, table).run_id == summary.run_id
