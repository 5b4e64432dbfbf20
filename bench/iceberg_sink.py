"""Apache Iceberg's own Kafka Connect sink, the lake's peer in ``bench.lake_ingest``: what a data
team deploys for Kafka to Iceberg with exactly-once.

``org.apache.iceberg:iceberg-kafka-connect`` runs in a Kafka Connect standalone worker (the jars of
``bench/iceberg_sink.pom.xml``, from Maven Central), reading the bench's topic with the cluster's
own client settings and writing the same table the user's job writes (the contract's columns,
partitioned by event hour, created beforehand in the same Hadoop catalog), its JSON values mapped
to those columns by name. Its commits go through its control topic; ``commit_interval`` is set so
that it commits within the run. The worker stays up for the whole bench, as the Spark session does
for the other paths; each run is a connector (and control topic) of its own, timed from its
creation to the commit that makes the last event visible to a reader. Its CPU is the Connect JVM's.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from pathlib import Path

import httpx
from confluent_kafka.admin import NewTopic

from bench.common import Round, cpu_since, tree_cpu
from conveyor import kafka
from conveyor.config import Platform
from conveyor.jars import java_binary, maven_classpath
from conveyor.java_client import java_settings, properties_text

POM = Path(__file__).with_name("iceberg_sink.pom.xml")
CONNECTOR = "org.apache.iceberg.connect.IcebergSinkConnector"


class SinkFailed(RuntimeError):
    """A task of the connector failed (its trace is in the message)."""


def _metadata(table_folder: Path) -> dict | None:
    """The table's current metadata, read as a reader finds it (Hadoop catalog)."""
    hint = table_folder / "metadata" / "version-hint.text"
    if not hint.is_file():
        return None
    return json.loads((table_folder / "metadata" / f"v{hint.read_text().strip()}.metadata.json").read_text())


def _snapshot(table_folder: Path) -> dict | None:
    """The table's current snapshot."""
    metadata = _metadata(table_folder) or {}
    current = metadata.get("current-snapshot-id")
    return next((s for s in metadata.get("snapshots", []) if s["snapshot-id"] == current), None)


def _snapshot_count(table_folder: Path) -> int:
    return len((_metadata(table_folder) or {}).get("snapshots", []))


def _worker_properties(client: dict[str, str], folder: Path, rest_port: int, commit_interval_ms: int) -> str:
    security = {k: v for k, v in client.items() if k != "bootstrap.servers"}
    props = {
        **client,
        **{f"{role}.{k}": v for role in ("producer", "consumer", "admin") for k, v in security.items()},
        # The bench's keys are plain strings (user ids), its values JSON objects without a schema.
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "false",
        "offset.storage.file.filename": str(folder / "connect.offsets"),
        "listeners": f"http://127.0.0.1:{rest_port}",
        "consumer.auto.offset.reset": "earliest",
        # A sink task handles the coordinator's commit requests only when the worker calls put(),
        # and with its partitions drained the worker waits in poll() until its next offset flush
        # (60 s by default): every commit would then wait out the coordinator's 30 s timeout.
        # Flushing as often as the sink commits keeps the run's tail as fast as its steady state.
        "offset.flush.interval.ms": str(commit_interval_ms),
    }
    return properties_text(props)


class ConnectWorker:
    """A Kafka Connect standalone worker with the sink's jars, up for the whole bench (as a data
    team's runs for months): each :meth:`run` is a connector of its own on the warm JVM, removed
    after it, as the Spark paths' rounds share one warm Spark session."""

    def __init__(self, platform: Platform, folder: Path, warehouse: Path, rest_port: int, tasks: int = 2,
                 commit_interval_ms: int = 1000) -> None:
        self.platform, self.warehouse, self.tasks = platform, warehouse, tasks
        self.commit_interval_ms = commit_interval_ms
        self.client = java_settings(kafka.client_config(platform, "central"))
        self.url = f"http://127.0.0.1:{rest_port}"
        classpath = maven_classpath(POM, "Iceberg's Kafka Connect sink")
        worker_file = folder / "connect-worker.properties"
        worker_file.write_text(_worker_properties(self.client, folder, rest_port, commit_interval_ms))
        self._log = open(folder / "connect.log", "ab")
        self.process = subprocess.Popen([java_binary(), "-Xmx1g", "-cp", os.pathsep.join(classpath),
                                         "org.apache.kafka.connect.cli.ConnectStandalone", str(worker_file)],
                                        stdout=self._log, stderr=subprocess.STDOUT)
        try:
            _wait(lambda: httpx.get(self.url, timeout=2).status_code == 200, 120, "the Connect worker's REST API",
                  self.process)
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> ConnectWorker:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self._log.close()

    def run(self, topic: str, table: str, events: int) -> Round:
        """One run of the sink over the whole of ``topic`` into ``table`` (``namespace.name``,
        already created empty in the Hadoop catalog at the warehouse)."""
        # A connector and control topic of the run's own: the sink keeps its source offsets in the
        # connector's consumer group, so a second run under the same name would start at the end.
        name = f"iceberg-{table.replace('.', '-')}-{uuid.uuid4().hex[:8]}"
        control_topic = f"{name}-control"
        factor = self.platform.cluster("central").default_replication_factor
        admin = kafka.admin(self.platform, "central")
        admin.create_topics([NewTopic(control_topic, 1, factor)])[control_topic].result()
        config = {
            "connector.class": CONNECTOR, "tasks.max": str(self.tasks), "topics": topic,
            "iceberg.tables": table, "iceberg.control.topic": control_topic,
            "iceberg.control.commit.interval-ms": str(self.commit_interval_ms),
            "iceberg.catalog.type": "hadoop", "iceberg.catalog.warehouse": str(self.warehouse),
            **{f"iceberg.kafka.{k}": v for k, v in self.client.items()},
        }
        cpu_before = tree_cpu(self.process.pid)
        started = time.monotonic()
        created = httpx.post(f"{self.url}/connectors", json={"name": name, "config": config}, timeout=30)
        if created.status_code >= 300:
            raise RuntimeError(f"the Iceberg sink was refused: {created.status_code} {created.text}")
        table_folder = self.warehouse.joinpath(*table.split("."))
        first_commit: list[float] = []

        def landed() -> bool:
            tasks = httpx.get(f"{self.url}/connectors/{name}/status", timeout=10).json().get("tasks", [])
            failed = [t for t in tasks if t.get("state") == "FAILED"]
            if failed:
                raise SinkFailed(f"task {failed[0]['id']} failed: {failed[0].get('trace', '')[:2000]}")
            snapshot = _snapshot(table_folder)
            if snapshot is not None and not first_commit:
                first_commit.append(time.monotonic() - started)
            return snapshot is not None and int(snapshot["summary"].get("total-records", 0)) >= events

        try:
            _wait(landed, 1800, f"the Iceberg sink to commit {events:,} events", self.process, interval=0.2)
            seconds = time.monotonic() - started
            return Round(seconds, cpu_since(cpu_before, self.process.pid), first_commit[0],
                           _snapshot_count(table_folder))
        finally:
            httpx.delete(f"{self.url}/connectors/{name}", timeout=60)
            admin.delete_topics([control_topic])


def _wait(check, timeout: float, what: str, worker: subprocess.Popen, interval: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if worker.poll() is not None:
            raise RuntimeError(f"the Connect worker exited with {worker.returncode} waiting for {what}")
        try:
            if check():
                return
        except (httpx.HTTPError, OSError, ValueError):
            pass
        time.sleep(interval)
    raise TimeoutError(f"{what}: not within {timeout:.0f} s")
