"""Any host can go: every service runs from its Kubernetes manifest alone, each on a host of its
own, and whole hosts are lost under traffic; every accepted event still lands once in central, the
lake and the views.

The session's platform is deployed as a team deploys it (tests/deploykit.py): its clusters named by
bootstrap, credentials as ``${VAR}`` of the Secret conveyor-secrets, the certificate files in the
Secret conveyor-tls, the lake on a JDBC catalog (PostgreSQL) with its warehouse and the views'
checkpoint on object storage (moto's S3 server). `conveyor deploy kubernetes` writes the manifests,
and every pod runs from its container as written (command, arguments, environment, mounts, working
folder), each in an empty folder on an address of its own (127.77.<worker>.<n>): two gateways per
data centre behind a Service each, two replicator workers, the registrar, two dispatcher nodes at
the StatefulSet's fixed names, the views job, the watcher, and the lake's CronJob, one run after
another. Every pod's readiness probe passes as written.

While the SDK sends hostile but valid events through both data centres, a seeded schedule loses
whole hosts, every kind at least once: every process of the pod SIGKILLed and its folder deleted,
then a replacement started from an empty folder on another address (a StatefulSet's pod under its
own name). Each loss must land on a running pod that had written to its folder. Then `conveyor
verify` (run on a host of its own too) must pass the lake, the audit, the views and the routes over
the accepted events, and the lake must hold exactly them.

It takes 4 to 6 minutes alone on the 2-core machine; the seconds of each phase are printed.
CONVEYOR_HOST_LOSSES sets how many hosts are lost (default: one of each kind, 7; `make soak` loses
21); CONVEYOR_CHAOS_SEED the seed.
"""

from __future__ import annotations

import json
import os
import ssl
import threading
import time
from collections import Counter

import pytest
from confluent_kafka import KafkaException
from pyiceberg.exceptions import NoSuchTableError

from conveyor.limits import BROKER_DEFAULT_MAX, event_limit
from conveyor.pipeline.lake import WRITING_ROWS
from tests.conftest import eventually
from tests.deploykit import DCS, Fleet, NotReady, Pod, ServiceTransport, addresses, case_topic, deployed_case
from tests.lakekit import lake_database, postgres_server, read_back  # noqa: F401
from tests.replicatekit import read_records
from tests.s3kit import s3_server  # noqa: F401
from tests.systemkit import Generator, Ledger, Phases

pytestmark = pytest.mark.chaos

TOKEN = "demo-adserver-token"
#: Events a second per data centre: the hosts, not the rate, are what this test puts under strain.
RATE = 20.0
KINDS = ("gateway", "replicator", "registrar", "dispatcher", "views", "watcher", "lake")
LOSSES = int(os.environ.get("CONVEYOR_HOST_LOSSES", len(KINDS)))


class LakeSchedule:
    """The lake's CronJob: one run after another, each a pod of its own, until stopped. A run that
    fails other than by its host's loss is kept to fail the test."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.current: Pod | None = None
        self.lost: set[str] = set()
        self.failed: list[str] = []
        self.runs = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            run = self.current = self.fleet.run(self.fleet.cronjob)
            assert run.process is not None
            code = run.process.wait()
            self.runs += 1
            if code != 0 and run.name not in self.lost:
                self.failed.append(f"{run.name} exited {code}: {run.log()}")

    def failures(self, context: str) -> str:
        """The failed runs' logs in full, one after another (a repr of the list would cut them)."""
        return "\n\n".join([*self.failed, context])

    def lose(self, run: Pod) -> bool:
        """``run``'s host lost; whether the run was still at work."""
        if not run.alive():
            return False
        self.lost.add(run.name)
        return run.lose()

    def start(self) -> None:
        self._thread.start()

    def writing(self) -> Pod | None:
        """The current run once it has logged that it writes its rows, else None."""
        run = self.current
        if run is None or not run.alive():
            return None
        return run if WRITING_ROWS in run.log_file.read_text(errors="replace") else None

    def stop(self, finish: bool = True) -> None:
        """No run after the current one, which is let finish, or lost (``finish`` False)."""
        self._stop.set()
        if not finish and self.current is not None:
            self.current.stop()
        if self._thread.ident is not None:
            self._thread.join(600)


def _ready(pod: Pod) -> None:
    eventually(pod.ready, 300, f"{pod.name} on {pod.address} to pass its readiness probe", (NotReady,), 0.5)


def test_hosts_lost_under_traffic_lose_no_event_with_every_service_run_from_its_manifest(  # noqa: F811
        provisioned, platform_data, platform_file, lake_database, s3_server, tmp_path, chaos_rng):
    hosts = addresses(int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")), 40 + 2 * LOSSES)
    topic = case_topic(tmp_path)
    variant, deployed, documents = deployed_case(platform_data, platform_file, lake_database, s3_server, tmp_path,
                                                 hosts)
    fleet = Fleet(documents, deployed, hosts, tmp_path / "hosts")
    parts = Counter(pod.part for pod in fleet.pods)
    assert parts == {"gateway": 4, "replicator": 2, "registrar": 1, "dispatcher": 2, "views": 1, "watcher": 1}, parts

    ca = ssl.create_default_context(cafile=str(deployed.ca))
    services = {dc: ServiceTransport(fleet, "gateway", f"conveyor-gateway-{dc}", ca) for dc in DCS}
    ledger = Ledger()
    losses: list[str] = []
    schedule = LakeSchedule(fleet)
    phases = Phases()

    try:
        for pod in fleet.pods:
            pod.start()
        for pod in fleet.pods:
            _ready(pod)
            phases.mark(f"ready {pod.part}")
        ports = {pod.workload["metadata"]["name"]: pod.container["ports"][0]["containerPort"]
                 for pod in fleet.of("gateway")}
        urls = {dc: f"https://conveyor-gateway-{dc}:{ports[f'conveyor-gateway-{dc}']}" for dc in DCS}
        schedule.start()
        with Generator(urls, topic, TOKEN, event_limit(2**20, BROKER_DEFAULT_MAX), chaos_rng, ledger, RATE,
                       str(deployed.ca), services) as generator:
            due = chaos_rng.sample(KINDS, len(KINDS))
            for n in range(LOSSES):
                time.sleep(chaos_rng.uniform(3, 8))
                kind = due[n] if n < len(due) else chaos_rng.choice(KINDS)
                if kind == "lake":
                    # A run may end between the line and its loss: the next one is lost then.
                    for _ in range(5):
                        run = eventually(schedule.writing, 600, "a lake run writing its rows, to lose", interval=0.2)
                        if schedule.lose(run):
                            break
                    else:
                        raise AssertionError("five lake runs ended before their loss")
                    losses.append(f"lake {run.name} while writing")
                    phases.mark("lose lake")
                    continue
                lost = chaos_rng.choice(fleet.of(kind))
                assert lost.ready() and lost.lose(), f"{lost.name} was not serving: {lost.log()}"
                losses.append(f"{kind} {lost.name} at {lost.address}")
                _ready(fleet.replace(lost))
                phases.mark(f"lose {kind}")
        context = f"hosts lost: {losses}"
        assert not generator.failures, (generator.failures, context)
        assert {loss.split()[0] for loss in losses} == set(KINDS), context

        accepted = set(ledger.events)
        assert len(accepted) > 100, context
        warehouse = s3_server.warehouse(f"{tmp_path.name}/warehouse")
        reader = s3_server.reader_properties()
        eventually(lambda: accepted <= {v["event_id"] for _, _, _, v in read_records(variant, [topic])}, 300,
                   f"every accepted event on central ({context})", errors=(KafkaException,))
        # The schedule goes on until the lake holds them; a run that failed fails the test at once.
        def lake_holds_them() -> bool:
            assert not schedule.failed, schedule.failures(context)
            return set(read_back(lake_database, warehouse, topic, reader)[0]) >= accepted

        try:
            eventually(lake_holds_them, 600, f"every accepted event in the lake ({context})",
                       errors=(NoSuchTableError,), interval=5)
        except AssertionError as failed:
            current = schedule.current.log() if schedule.current is not None else "none"
            raise AssertionError(f"{failed}; {schedule.runs} lake runs ended; the current run's log: {current}") from None
        phases.mark("central and lake")
        schedule.stop()
        assert not schedule.failed, schedule.failures(context)
        landed, _, lineage = read_back(lake_database, warehouse, topic, reader)
        assert Counter(landed) == Counter(accepted), (context, lineage)

        # The views: stopped, then finished over what central holds now, from the same pod spec.
        (views,) = fleet.of("views")
        views.stop()
        finish = fleet.run(views.workload, "--available-now")
        assert finish.process is not None and finish.process.wait(600) == 0, finish.log()
        phases.mark("views finished")

        # The checker on a host of its own, with a pod's platform file, secrets and empty folder.
        accepted_file = tmp_path / "accepted.ndjson"
        ledger.write(accepted_file, topic)
        verify = fleet.run(views.workload, args=(
            "verify", "--platform", "/etc/conveyor/platform.yaml", "--accepted", str(accepted_file), "--min-events",
            "1", "-o", "json", *(f"--only={check}" for check in ("lake", "audit", "views", "replication"))))
        assert verify.process is not None
        verify.process.wait(900)
        lines = verify.log_file.read_text().splitlines()
        first = next(i for i, line in enumerate(lines) if line.startswith("{"))  # its logs come before
        text = "\n".join(lines[first:])
        checks = json.loads(text[:text.rindex("}") + 1])["checks"]
        phases.mark("verify")
        assert verify.process.returncode == 0, [c for c in checks if c["verdict"] != "PASS"]
        assert {c["invariant"] for c in checks if c["verdict"] == "PASS"} == {"lake", "audit", "views", "replication"}
        print(f"{len(accepted)} events accepted, {schedule.runs} lake runs; {context}")
    finally:
        print(f"seconds per phase: {phases.seconds}")
        schedule.stop(finish=False)
        fleet.stop()
