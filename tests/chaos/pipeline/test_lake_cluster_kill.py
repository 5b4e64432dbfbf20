"""Exactly-once on a Spark standalone cluster (tests/sparkkit.py) under SIGKILL: while events keep
arriving, `conveyor lake run --once` runs in client mode against the cluster's master and is
struck in its runs, either in its executor once the run has written a data file (the worker's
child JVM, with its Python workers: the run goes on, Spark runs the lost tasks again on the
executor the master starts in its place) or in its driver at a random moment (the process group of
the `conveyor` process and its JVM: the run dies, its executor with it). After the kills and a final clean run the table holds exactly the produced
event_ids, each once, and the quarantine exactly the bad records.

CONVEYOR_CLUSTER_KILLS sets the number of struck runs, half of them executor kills (default 1, an
executor kill: what only a cluster has; a killed driver is the local twin's case and is struck here
from 2 on; 10 for the full count). Each run must be an application of the cluster, whose executor
Python cannot import ``conveyor`` by itself (tests/sparkkit.py): the run ships it. CONVEYOR_CHAOS_SEED replays the kinds' order and the kill
times. The local-mode twin is tests/chaos/pipeline/test_lake_kill.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from conveyor.pipeline.lake import run_once
from tests.lakekit import (  # noqa: F401
    ChaosTraffic,
    LakeCase,
    Kill,
    assert_landed_once,
    kill_driver,
    killed_runs,
    lake_case,
    lake_folder,
    lake_spark,
    unreferenced_files,
    wrote_a_file,
)
from tests.sparkkit import SparkCluster, on_cluster, spark_cluster  # noqa: F401

pytestmark = pytest.mark.chaos

KILLS = int(os.environ.get("CONVEYOR_CLUSTER_KILLS", "1"))


def _started(pid: int) -> int:
    """When the process started, in clock ticks since boot (/proc/<pid>/stat, field 22)."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


def kill_executor(cluster: SparkCluster, case: LakeCase) -> Kill:
    """SIGKILL the run's executor once it has written a data file: its JVM is the worker's child,
    started after the run's driver (an earlier run's executor may still be going away)."""

    def strike(process: subprocess.Popen) -> bool:
        since = _started(process.pid)
        if not wrote_a_file(case, process):
            return False
        for pid in cluster.daemons.executor_pids():
            try:
                if _started(pid) >= since:
                    os.kill(pid, signal.SIGKILL)
                    return True
            except (FileNotFoundError, ProcessLookupError):
                continue
        return False

    return Kill("executor mid-write", strike, timed=False)


def test_runs_struck_in_executor_or_driver_land_every_event_exactly_once_by_their_offsets_alone_with_dedup_off(
        lake_spark, lake_case, spark_cluster, chaos_rng, tmp_path):
    case = lake_case(partitions=3, dedup_window="0s", orphan_age="0s")
    on_cluster(case.path, spark_cluster)
    kills = [kill_executor(spark_cluster, case), Kill("driver", kill_driver)] * ((KILLS + 1) // 2)
    kills = kills[:KILLS]
    chaos_rng.shuffle(kills)
    log = tmp_path / "lake-runs.log"
    before = spark_cluster.applications()
    # About 100 events/s: each run has work for its tasks, and a backlog that stays small enough
    # for runs of a loaded machine's cluster (a minute each at load 40) to keep up.
    with ChaosTraffic(case, pause=0.25) as traffic:
        outcomes = killed_runs(case.path, log, chaos_rng, kills)
    context = f"runs {outcomes}; log {log}"
    # A lost executor is Spark's to recover from: the run must still succeed.
    survived = [o for o in outcomes if not (o.hit and o.kill == "driver")]
    assert all(o.returncode == 0 for o in survived), (context, log.read_text()[-4000:])
    hits = {kind: sum(o.hit and o.kill == kind for o in outcomes) for kind in ("executor mid-write", "driver")}
    print(f"{hits} struck, {len(outcomes) - KILLS} finished before their kill: {outcomes}")
    # Each run was an application of the cluster (a driver struck early may not have reached it).
    assert len(spark_cluster.applications()) - len(before) >= len(outcomes) - hits["driver"], context

    final = run_once(lake_spark, case.platform).topics[0]
    assert final.lost == 0
    assert_landed_once(lake_spark, case, traffic, context)
    # Not asserted: a lost executor's partial files stay until a run finds a dead run's mark.
    print(f"files no snapshot references: {unreferenced_files(lake_spark, case)}")
