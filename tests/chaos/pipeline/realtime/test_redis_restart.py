"""The views survive Redis restarts: while events keep arriving and the views job writes, the
platform's Redis (TLS, the ACL file's users, the append-only file, as ``conveyor up`` runs it) is
stopped by SIGTERM and then by SIGKILL, each time while batches are written, and started again. The
job rides through each restart on its own (no restart, no rebuild), and at the end every counter
equals the count computed from the acknowledged events.

Each restart must have had something to lose: the append-only file's increments held transactions
(the Lua scripts' writes) when Redis stopped, and Redis loaded them back.

The second test SIGKILLs the master of a Redis Cluster (three masters with a replica each) that
holds the job's state while batches are written; its replica takes over, the job writes the batch
it was in again and goes on, and every counter is exact at the end.

CONVEYOR_CHAOS_SEED replays a run's restart points and traffic.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from redis.crc import key_slot

from conveyor.pipeline.realtime.plan import job_id, job_views
from conveyor.pipeline.realtime.store import ViewStore, connect, connect_to
from tests.conftest import eventually
from tests.lakekit import lake_folder  # noqa: F401
from tests.realtimekit import (RealtimeCase, Sent, batches_logged, cluster_target, counters_in_redis,  # noqa: F401
                               expected_counters, platform_redis, realtime_case, replicated_redis_cluster, start_job,
                               traffic_to)

pytestmark = pytest.mark.chaos

PARTITIONS = 3


@dataclass
class _Job:
    """The views job of a case as a process of its own (its own session: a kill takes its JVM too)."""

    case: RealtimeCase
    log: Path

    def __post_init__(self) -> None:
        self.store = ViewStore(connect(self.case.platform), job_id(job_views(self.case.platform)))
        self.process = start_job(self.case.path, self.log)

    def batches(self) -> int:
        """Batches logged so far; fails at once if the job has stopped."""
        assert self.process.poll() is None, f"the job stopped: {self.log.read_text()[-3000:]}"
        return batches_logged(self.log)

    def drain_and_check(self, traffic: Sent, context: str) -> None:
        """Once the job has counted every record sent, stop it; every counter equals the recount."""
        sent = len(traffic.good) + traffic.bad
        eventually(lambda: self.batches() and self.store.state().counters.get("records") == sent, 240,
                   f"the job to count every record sent ({context}, log {self.log})")
        self.process.send_signal(signal.SIGTERM)
        assert self.process.wait(120) == 0, f"{context}: {self.log.read_text()[-3000:]}"
        expected_ctr, expected_interests = expected_counters(traffic.good, self.case.ctr, self.case.interests)
        assert counters_in_redis(self.case.platform, self.case.ctr) == expected_ctr, context
        assert counters_in_redis(self.case.platform, self.case.interests) == expected_interests, context
        counters = self.store.state().counters
        assert counters == {"records": sent, "applied": len(traffic.good), "malformed": traffic.bad}, (counters,
                                                                                                        context)


def test_views_survive_redis_restarts_by_sigterm_and_sigkill(realtime_case, platform_redis, chaos_rng, tmp_path):
    case = realtime_case(partitions=PARTITIONS, ctr_lateness="10m", interest_lateness="10m", redis=platform_redis.url)
    seed = chaos_rng.randrange(1 << 32)
    restarts: list[tuple[str, int | None, int]] = []
    with traffic_to(case, seed, partitions=PARTITIONS) as traffic:
        job = _Job(case, tmp_path / "realtime.log")
        for sig in (signal.SIGTERM, signal.SIGKILL):
            seen = job.batches()
            eventually(lambda: job.batches() > seen, 240, f"the job to log a batch (log {job.log}, {restarts})")
            time.sleep(chaos_rng.uniform(0, 1.5))  # while the next batches are written
            written = platform_redis.changes_since_rewrite()
            batch = job.store.state().batch
            platform_redis.stop(sig)
            restarts.append((sig.name, batch, written.count(b"MULTI")))
            platform_redis.start()
        seen = job.batches()
        eventually(lambda: job.batches() > seen + 2, 240, f"the job to go on after the restarts (log {job.log})")
    context = f"restarts (signal, batch committed before it, transactions in the file): {restarts}"
    # Each restart had transactions to replay, and Redis replayed every one of them.
    assert all(transactions > 0 for _, _, transactions in restarts), context
    assert "NOPERM" not in platform_redis.log.read_text(errors="replace"), context
    job.drain_and_check(traffic, context)


def test_views_survive_a_redis_cluster_master_sigkilled(realtime_case, replicated_redis_cluster, chaos_rng, tmp_path):
    cluster = replicated_redis_cluster
    case = realtime_case(partitions=PARTITIONS, ctr_lateness="10m", interest_lateness="10m", redis=cluster.urls)
    seed = chaos_rng.randrange(1 << 32)

    def serving(key: str) -> int:
        """The port of the master that serves ``key``, as the cluster says now."""
        return connect_to(cluster_target(case.platform, cluster.urls)).get_node_from_key(key).port

    with traffic_to(case, seed, partitions=PARTITIONS) as traffic:
        job = _Job(case, tmp_path / "realtime.log")
        eventually(lambda: job.batches() > 2, 240, f"the job to log batches (log {job.log})")
        # The master that holds the job's state: every batch writes there, the commit last.
        store = job.store

        def holders() -> list[int] | None:
            """The ports of the master and a replica of the job's slot, once the cluster lists a replica
            (a loaded machine's replica may not have joined yet when the job starts)."""
            store.client.nodes_manager.initialize()
            nodes = store.client.nodes_manager.slots_cache[key_slot(store.key.encode())]
            return [n.port for n in nodes] if len(nodes) >= 2 else None

        master, replica = eventually(holders, 60, "the cluster to list a replica of the job's slot",
                                     errors=(redis.RedisError,))[:2]
        time.sleep(chaos_rng.uniform(0, 1.5))  # while the next batches are written
        seen = job.batches()
        os.kill(cluster.processes[master].pid, signal.SIGKILL)
        eventually(lambda: serving(store.key) == replica, 60, f"replica {replica} to take over from {master}",
                   errors=(redis.RedisError,))
        eventually(lambda: job.batches() > seen + 3, 240, f"the job to go on after the failover (log {job.log})")
    context = f"master {master} killed after batch {seen}, replica {replica} took over"
    # The job met the dead master inside a batch, and wrote that batch again.
    assert "writing it again" in job.log.read_text(errors="replace"), context
    job.drain_and_check(traffic, context)
