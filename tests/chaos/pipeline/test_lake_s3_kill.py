"""Exactly-once under SIGKILL with the lake on object storage: Iceberg's JDBC catalog on a real
PostgreSQL and the warehouse on an S3 API (moto's server) through S3FileIO, the platform's way to
run the lake on many hosts. While events keep arriving, lake runs (each its own process with its
Spark driver) are killed, the last one mid-write (once it has put a data file in the bucket, before
its commit); a final run then leaves the table with exactly the produced events, each once, read
back by another client (pyiceberg), and deletes from the bucket every file the killed runs wrote.

CONVEYOR_LAKE_CHAOS_RUNS sets the number of killed runs (default 1: the mid-write one). De-dup is
off, so only the offsets committed with the data keep the count exact; one writer at a time, so a
killed run's files may go at once (orphan_age 0s).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from conveyor.config.resolved import RESOLVED_VIEW_FILE
from tests.conftest import platform_variant
from tests.lakekit import (  # noqa: F401
    ChaosTraffic,
    Kill,
    LakeCase,
    kill_driver,
    kill_driver_mid_write,
    killed_runs,
    lake_data,
    lake_process,
    lake_database,
    postgres_server,
    read_back,
    sql_catalog,
)
from tests.s3kit import BUCKET, S3Server, s3_server  # noqa: F401

pytestmark = pytest.mark.chaos

RUNS = int(os.environ.get("CONVEYOR_LAKE_CHAOS_RUNS", "1"))


def _unreferenced(s3: S3Server, server, warehouse: str, topic: str) -> list[str]:
    """The data files in the bucket under the topic's tables that no snapshot of them references."""
    catalog = sql_catalog(server, warehouse, s3.reader_properties())
    try:
        referenced = set()
        for namespace in ("events", "quarantine"):
            if not catalog.table_exists((namespace, topic)):
                continue
            table = catalog.load_table((namespace, topic))
            # Every snapshot's manifests (pyiceberg's all_data_files fails on snapshots with none).
            referenced |= {entry.data_file.file_path.removeprefix("s3://")
                           for snapshot in table.snapshots() for manifest in snapshot.manifests(table.io)
                           for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False)}
    finally:
        catalog.engine.dispose()
    stored = {f"{BUCKET}/{key}" for key in s3.keys(f"{topic}/") if key.endswith(".parquet")}
    return sorted(stored - referenced)


def test_killed_runs_on_object_storage_land_every_event_once_by_their_offsets_alone_with_dedup_off(
        platform_data, platform_file, lake_database, s3_server, topic_factory, provisioned, chaos_rng, tmp_path):
    topic = topic_factory("central", 3)
    warehouse = s3_server.warehouse(topic)
    data = lake_data(platform_data, platform_file, tmp_path, topic, 3, {"dedup_window": "0s", "orphan_age": "0s"})
    data["pipeline"]["catalog"] = {"type": "jdbc", "uri": lake_database.url, "warehouse": warehouse,
                                   "options": {"jdbc.user": lake_database.user, **s3_server.catalog_options()}}
    # A home of its own (the run's state folder is there when the warehouse is remote), with the view
    # of the running clusters `conveyor up` wrote.
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(Path(platform_data["runtime"]["home"]) / RESOLVED_VIEW_FILE, home / RESOLVED_VIEW_FILE)
    data["runtime"]["home"] = str(home)
    path = tmp_path / "platform.yaml"
    case = LakeCase(platform_variant(data, path), path, topic,
                    stored_files=lambda: {k for k in s3_server.keys(f"{topic}/") if k.endswith(".parquet")})
    log = tmp_path / "lake-runs.log"
    kills = [Kill("driver", kill_driver)] * (RUNS - 1) + [kill_driver_mid_write(case)]
    with ChaosTraffic(case) as traffic:
        outcomes = killed_runs(case.path, log, chaos_rng, kills)
    context = f"runs {outcomes}"
    assert all(o.returncode == 0 for o in outcomes if not o.hit), (outcomes, log.read_text()[-3000:])
    left = _unreferenced(s3_server, lake_database, warehouse, topic)
    assert left, ("the last kill did not land mid-write: it left no file of its own in the bucket", context)

    final = lake_process(case.path, log)
    assert final.wait(600) == 0, log.read_text()[-3000:]
    landed, _, lineage = read_back(lake_database, warehouse, topic, s3_server.reader_properties())
    assert len(landed) == len(traffic.good), (context, lineage)
    assert sorted(landed) == sorted(traffic.good), context
    assert _unreferenced(s3_server, lake_database, warehouse, topic) == [], (context, "killed runs' files stayed")
