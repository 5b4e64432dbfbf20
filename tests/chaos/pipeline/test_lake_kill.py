"""Exactly-once under SIGKILL: while events keep arriving, the lake job (its own process with its
Spark driver) is killed at random points, then run again; at the end the table holds exactly the
produced events, each once, and no file of a killed run is left behind.

CONVEYOR_LAKE_CHAOS_RUNS sets the number of killed runs (default 1; 20 for the full count): the
last is killed mid-write (once the run has written a data file, before its commit), the others at
random moments. De-duplication by event_id is off here, so only the offsets committed with the
data can keep the count exact. tests/chaos/pipeline/test_lake_cluster_kill.py does the same on a standalone Spark cluster.
"""

from __future__ import annotations

import os

import pytest

from conveyor.pipeline.lake import run_once
from conveyor.pipeline.tables import data_table, quarantine_table
from tests.lakekit import (  # noqa: F401
    ChaosTraffic,
    Kill,
    assert_landed_once,
    kill_driver,
    kill_driver_mid_write,
    killed_runs,
    lake_case,
    lake_folder,
    lake_spark,
    unreferenced_files,
)

pytestmark = pytest.mark.chaos

RUNS = int(os.environ.get("CONVEYOR_LAKE_CHAOS_RUNS", "1"))


def test_killed_runs_land_every_event_exactly_once_by_their_offsets_alone_with_dedup_off(
        lake_spark, lake_case, chaos_rng, tmp_path):
    # One writer here: files of a killed run may go at once (orphan_age 0s), and must.
    case = lake_case(partitions=3, dedup_window="0s", orphan_age="0s")
    log = tmp_path / "lake-runs.log"
    kills = [Kill("driver", kill_driver)] * (RUNS - 1) + [kill_driver_mid_write(case)]
    with ChaosTraffic(case) as traffic:
        outcomes = killed_runs(case.path, log, chaos_rng, kills)
    assert all(o.returncode == 0 for o in outcomes if not o.hit), (outcomes, log.read_text()[-3000:])
    print(f"{RUNS} runs killed, {len(outcomes) - RUNS} finished before their kill")
    context = f"runs {outcomes}"
    left = unreferenced_files(lake_spark, case)
    assert any(left.values()), ("the last kill did not land mid-write: it left no file of its own", context)

    final = run_once(lake_spark, case.platform).topics[0]
    assert final.lost == 0
    assert_landed_once(lake_spark, case, traffic, context)
    # Every data file on disk belongs to the table: what killed runs wrote was deleted.
    assert unreferenced_files(lake_spark, case) == {data_table(case.topic): [], quarantine_table(case.topic): []}, context
