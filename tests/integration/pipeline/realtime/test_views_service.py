"""`conveyor views start`: the views job as a service of the local platform, as `make demo` leaves it
running. Started from the CLI, it counts what arrives, a second start finds it running, it comes
back after a SIGKILL (the supervisor's restart) and resumes from its checkpoint, and it stops with
the platform's services."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from conveyor.pipeline.realtime.plan import job_id, job_views
from conveyor.pipeline.realtime.store import ViewStore, connect
from conveyor.runtime import processes
from conveyor.runtime.services import service_daemons
from tests.conftest import eventually
from tests.realtimekit import counters_in_redis, expected_counters, realtime_case, traffic_to  # noqa: F401

pytestmark = pytest.mark.integration


def _conveyor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "conveyor", *args], capture_output=True, text=True, timeout=120)


def _child(pid: int) -> int | None:
    """The process ``pid`` started (the supervisor starts one: the service)."""
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return int(found[0]) if found else None


def test_views_start_keeps_the_job_running_through_a_kill_and_every_counter_exact(realtime_case, chaos_rng):
    case = realtime_case(partitions=2, ctr_lateness="10m", interest_lateness="10m")
    store = ViewStore(connect(case.platform), job_id(job_views(case.platform)))
    daemons = []
    try:
        with traffic_to(case, chaos_rng.randrange(1 << 32), partitions=2) as traffic:
            started = _conveyor("views", "start", "--platform", str(case.path))
            assert started.returncode == 0 and "views started" in started.stdout, started.stdout + started.stderr
            daemons = [d for d in service_daemons(case.platform) if d.name == "views"]
            again = _conveyor("views", "start", "--platform", str(case.path))
            assert again.returncode == 0 and "already running" in again.stdout, again.stdout + again.stderr
            eventually(lambda: store.state().counters.get("records", 0) > 0, 240, "the service's first batch")
            # The job under the supervisor, not the supervisor: the service is started again.
            (supervisor,) = [processes.running_pid(d) for d in daemons]
            job = _child(supervisor)
            assert job is not None
            os.kill(job, signal.SIGKILL)
            eventually(lambda: _child(supervisor) not in (None, job), 60, "the supervisor to start the job again")
        sent = len(traffic.good) + traffic.bad
        eventually(lambda: store.state().counters.get("records") == sent, 300, "the service to count every record")
        expected_ctr, expected_interests = expected_counters(traffic.good, case.ctr, case.interests)
        assert counters_in_redis(case.platform, case.ctr) == expected_ctr
        assert counters_in_redis(case.platform, case.interests) == expected_interests
    finally:
        assert processes.stop(daemons, 60) == [d.name for d in daemons]
