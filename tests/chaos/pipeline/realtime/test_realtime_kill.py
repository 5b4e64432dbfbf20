"""Exactly-once in Redis under SIGKILL: while events keep arriving, the real-time job (its own
process with its Spark driver) is killed at random points with every process of its session (its
JVM, PySpark's workers), as a pod's loss takes them, and started again from its checkpoint;
at the end every counter of both views equals the count computed from the acknowledged events,
and the job's state counts exactly the malformed records produced. In the last test the job's
host is lost with it: its checkpoint is on object storage (moto's S3 server, through Hadoop's
S3A), each run works in a folder of its own (Spark's scratch space, temporary files) that is
deleted with the kill, and the next run starts from an empty one. The Redis Cluster test sends about a
fifth of the events twice (a failover's second copy, on another partition, at once or seconds
later: often in another batch, sometimes across a kill), and every counter must equal the count
over distinct events.

The host test keeps the views in the session's Redis server; the duplicates test in a Redis
Cluster of three masters (tests/realtimekit.py), where the views' writes go per hash slot and the
claims per hash-tag bucket (the integration tests run the Lua scripts on both kinds).

The real-time mode test runs the job in Spark's real-time mode (tasks that stay up and write as records
arrive, fenced per partition): the kills land while its tasks write, a restart reads again from the
last real-time batch Spark logged, and every counter must still be exact.

CONVEYOR_REALTIME_CHAOS_KILLS sets the number of kills of the host test (default 1; the full
count is 10), CONVEYOR_REALTIME_CLUSTER_KILLS those of the Redis Cluster test (default 1),
CONVEYOR_REALTIME_LIVE_KILLS those of the real-time mode's (default 1; the full count is 10). The
first kill of a test lands while batches are written (within 3 s of one logged; in real-time mode
within 1 s of a write after one logged); later ones now and then during start-up or the first batch
instead.
CONVEYOR_CHAOS_SEED replays a run's kill points and traffic.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import time
from pathlib import Path

import pytest

from conveyor.pipeline.realtime.live import diagnostics_key, live_state
from conveyor.pipeline.realtime.plan import job_id, job_views
from conveyor.pipeline.realtime.store import ViewStore, connect
from tests.conftest import eventually
from tests.lakekit import lake_folder  # noqa: F401
from tests.realtimekit import (Sent, batches_logged, counters_in_redis, expected_counters,  # noqa: F401
                               kill_session, realtime_case, redis_cluster, start_job, traffic_to)
from tests.s3kit import s3_server  # noqa: F401

pytestmark = pytest.mark.chaos

KILLS = int(os.environ.get("CONVEYOR_REALTIME_CHAOS_KILLS", "1"))
CLUSTER_KILLS = int(os.environ.get("CONVEYOR_REALTIME_CLUSTER_KILLS", "1"))
LIVE_KILLS = int(os.environ.get("CONVEYOR_REALTIME_LIVE_KILLS", "1"))
PARTITIONS = 3


def _killed_and_drained(case, tmp_path: Path, duplicates: bool, kills_wanted: int = KILLS,
                        hosts: Path | None = None) -> tuple[Sent, str]:
    """Traffic while the job is killed ``kills_wanted`` times, then a final run through everything:
    what was acknowledged, and the seed and kill points to print on a failure. ``hosts``: each run
    works in an empty folder of its own under it, deleted with the kill (its host lost)."""
    seed = int(os.environ.get("CONVEYOR_CHAOS_SEED", time.time_ns() % 1_000_000))
    rng = random.Random(seed)
    log = tmp_path / "realtime-runs.log"
    kills = []
    live = case.platform.pipeline.realtime.mode != "micro-batch"
    job = job_id(job_views(case.platform))
    partitions = [(case.topic, p) for p in range(PARTITIONS)]

    def live_records() -> int:
        return int(live_state(connect(case.platform), job, partitions)[1].get("records", 0))

    def folder(n: int) -> Path | None:
        return None if hosts is None else hosts / f"host-{n}"

    with traffic_to(case, seed, duplicates, PARTITIONS) as traffic:
        for n in range(kills_wanted):
            process = start_job(case.path, log, folder=folder(n))
            if n and rng.random() < 0.25:  # now and then during start-up or the first batch
                delay = rng.uniform(2, 15)
            else:  # mostly while batches are written: wait for one, then kill within the next few
                seen = batches_logged(log)

                def next_batch() -> bool:
                    assert process.poll() is None, f"seed {seed}: {log.read_text()[-3000:]}"
                    return batches_logged(log) != seen

                # No batch in 4 minutes is a wedged job, not a slow one: fail rather than kill blind.
                eventually(next_batch, 240, f"the job to log a batch (seed {seed}, log {log})")
                if live:  # the kill must land after writes of the batch Spark has not logged yet
                    logged = live_records()
                    eventually(lambda: live_records() > logged, 120, f"writes after a logged batch (seed {seed})")
                delay = rng.uniform(0, 1 if live else 3)
            time.sleep(delay)
            assert process.poll() is None, f"seed {seed}: {log.read_text()[-3000:]}"
            kill_session(process)
            kills.append(round(delay, 1))
            if hosts is not None:  # the host's disk goes with it, Spark's scratch space in use
                assert any(folder(n).glob("spark/blockmgr-*")), f"seed {seed}: run {n} kept nothing in its folder"
                shutil.rmtree(folder(n))
    # Everything acknowledged is in Kafka now; one last run reads it all and stops.
    context = f"seed {seed}, kills after {kills}"
    if not live:
        final = start_job(case.path, log, "--available-now", folder=folder(kills_wanted))
        assert final.wait(600) == 0, f"{context}: {log.read_text()[-3000:]}"
    else:  # real-time mode runs until stopped: until it has counted every record sent
        final = start_job(case.path, log)
        sent = len(traffic.good) + traffic.bad
        counted: list[int] = []

        def all_counted() -> bool:
            assert final.poll() is None, f"{context}: the last run ended: {log.read_text()[-3000:]}"
            counted.append(live_records())
            return counted[-1] == sent

        eventually(all_counted, 600, f"the last run to count every record ({context}, log {log})",
                   detail=lambda: f"counted {counted[-1] if counted else None} of {sent}")
        final.send_signal(signal.SIGTERM)
        assert final.wait(120) == 0, f"{context}: {log.read_text()[-3000:]}"
    return traffic, context


def test_killed_jobs_count_each_event_once_in_a_redis_cluster(realtime_case, redis_cluster, tmp_path):
    case = realtime_case(partitions=PARTITIONS, ctr_lateness="10m", interest_lateness="10m", redis=redis_cluster)
    traffic, context = _killed_and_drained(case, tmp_path, duplicates=True, kills_wanted=CLUSTER_KILLS)

    distinct = list({e["event_id"]: e for e in traffic.good}.values())
    copies = len(traffic.good) - len(distinct)
    assert copies > 0, context
    expected_ctr, expected_interests = expected_counters(distinct, case.ctr, case.interests)
    assert counters_in_redis(case.platform, case.ctr) == expected_ctr, context
    assert counters_in_redis(case.platform, case.interests) == expected_interests, context
    counters = ViewStore(connect(case.platform), job_id(job_views(case.platform))).state().counters
    assert counters["records"] == len(traffic.good) + traffic.bad, context
    assert counters["applied"] == len(distinct), context
    assert counters.get("duplicates") == copies, (counters, context)
    assert set(counters) == {"records", "applied", "malformed", "duplicates"}, (counters, context)


def test_killed_real_time_mode_jobs_leave_every_counter_exact(realtime_case, tmp_path):
    # Real-time mode runs a task per partition at once; small Arrow batches, so ~130 events/s a
    # partition are written every fraction of a second, and short real-time batches, so some end
    # (Spark logs them) between kills and a restart reads again only from the last one's end.
    case = realtime_case(partitions=PARTITIONS, ctr_lateness="10m", interest_lateness="10m",
                         spark={"master": f"local[{PARTITIONS}]"}, mode="real-time", real_time_rows=20,
                         real_time_batch="10s")
    traffic, context = _killed_and_drained(case, tmp_path, duplicates=True, kills_wanted=LIVE_KILLS)

    distinct = list({e["event_id"]: e for e in traffic.good}.values())
    expected_ctr, expected_interests = expected_counters(distinct, case.ctr, case.interests)
    assert counters_in_redis(case.platform, case.ctr) == expected_ctr, context
    assert counters_in_redis(case.platform, case.interests) == expected_interests, context
    client = connect(case.platform)
    job = job_id(job_views(case.platform))
    counters = live_state(client, job, [(case.topic, p) for p in range(PARTITIONS)])[1]
    notes = client.hgetall(diagnostics_key(job))
    context = f"{context}, after the restarts: {notes.get('reread')} records read again, " \
              f"{notes.get('recovered')} written record by record"
    assert int(notes.get("reread", 0)) > 0, context  # a kill landed after writes Spark had not logged
    assert dict(counters) == {"records": len(traffic.good) + traffic.bad, "applied": len(distinct),
                              "malformed": traffic.bad, "duplicates": len(traffic.good) - len(distinct)}, context


def test_jobs_killed_with_their_host_resume_from_a_checkpoint_on_s3_and_leave_every_counter_exact(
        realtime_case, s3_server, tmp_path):
    # A batch every 2 s: each one's checkpoint files go to S3 through S3A (a rename is a copy there).
    case = realtime_case(partitions=PARTITIONS, ctr_lateness="10m", interest_lateness="10m",
                         spark={"conf": s3_server.s3a_conf()}, checkpoint=s3_server.warehouse(tmp_path.name),
                         trigger="2s")
    traffic, context = _killed_and_drained(case, tmp_path, duplicates=False, hosts=tmp_path / "hosts")
    job = job_id(job_views(case.platform))
    # Every run logged its batches there: the killed ones at least one each, the last one more.
    logged = s3_server.keys(f"{tmp_path.name}/{job}/offsets/")
    assert len(logged) >= KILLS + 1 and s3_server.keys(f"{tmp_path.name}/{job}/commits/"), (logged, context)

    expected_ctr, expected_interests = expected_counters(traffic.good, case.ctr, case.interests)
    assert counters_in_redis(case.platform, case.ctr) == expected_ctr, context
    assert counters_in_redis(case.platform, case.interests) == expected_interests, context
    counters = ViewStore(connect(case.platform), job_id(job_views(case.platform))).state().counters
    assert counters["records"] == len(traffic.good) + traffic.bad, context
    assert counters["malformed"] == traffic.bad, context
    assert counters["applied"] == len(traffic.good), context
    assert set(counters) == {"records", "applied", "malformed"}, (counters, context)  # nothing late
