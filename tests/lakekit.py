"""Fixtures and helpers of the lake tests (integration and chaos); test modules import them.

Every lake test lands its own topic (created on central, declared with the ad-events contract in a
platform file of its own) into one warehouse shared by the session, so one Spark session serves
all of them. Spark starts once per test process; the chaos tests run their jobs as separate
processes (:func:`killed_runs`) while :class:`ChaosTraffic` keeps events arriving.
"""

from __future__ import annotations

import copy
import functools
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from conveyor import kafka
from conveyor.config import Platform, load_resolved_platform
from conveyor.pipeline.spark import spark_session
from conveyor.runtime import postgres
from conveyor.runtime.postgres import PostgresLayout
from conveyor.pipeline.tables import data_table, quarantine_table
from tests.conftest import demo_event, platform_variant

ROOT = Path(__file__).resolve().parents[1]
CONTRACT = ROOT / "contracts" / "ad-events.schema.json"


@pytest.fixture(scope="session")
def lake_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's one folder for the lake: test modules each import these fixtures (and so
    each instantiate them), so it is derived from the session, never made per module."""
    folder = tmp_path_factory.getbasetemp() / "lake"
    folder.mkdir(exist_ok=True)
    return folder


def lake_data(platform_data: dict[str, Any], platform_file: Path, folder: Path, topic: str | None,
              partitions: int, lake: dict[str, Any], delivery: str = "exact",
              clusters: tuple[str, ...] = ("central",), direct_producers: tuple[str, ...] = ()) -> dict[str, Any]:
    """The session's platform with its lake in ``folder`` (a Hadoop catalog) and ``topic``, if
    given, on ``clusters`` (central, the lake's source, among them) as the lake's only topic, written
    on Kafka by ``direct_producers`` besides the bus."""
    data = copy.deepcopy(platform_data)
    for spec in data["topics"].values():  # the file is written elsewhere: keep contracts found
        if spec.get("contract"):
            spec["contract"] = str(platform_file.parent / spec["contract"])
    pipeline = data.setdefault("pipeline", {})
    pipeline.update(source="central", catalog={"warehouse": str(folder / "warehouse")})
    if topic is not None:
        data["topics"][topic] = {"partitions": partitions, "contract": str(CONTRACT), "clusters": list(clusters),
                                 "delivery": delivery, "direct_producers": list(direct_producers)}
        keep = lake.get("keep_raw_value")
        pipeline["lake"] = {"topics": [topic], **lake, **({"keep_raw_value": [topic]} if keep is True else {})}
    return data


@functools.cache
def _spark(platform_file: Path) -> Any:
    return spark_session(load_resolved_platform(platform_file), "conveyor-tests")


@pytest.fixture(scope="session")
def lake_spark(platform_data: dict[str, Any], platform_file: Path, lake_folder: Path, local_platform: Any) -> Any:
    """One Spark session on the session's warehouse, whichever module asks first."""
    path = lake_folder / "platform.yaml"
    path.write_text(yaml.safe_dump(lake_data(platform_data, platform_file, lake_folder, None, 0, {}), sort_keys=False))
    return _spark(path)


@dataclass(frozen=True)
class LakeCase:
    """A platform whose only lake topic is a new topic on central, and its platform file."""

    platform: Platform
    path: Path
    topic: str
    #: Every data file of the case's tables, referenced or not, for a warehouse that is no local
    #: folder (an object store's keys); None: found on disk.
    stored_files: Callable[[], set[str]] | None = None


@pytest.fixture
def lake_case(platform_data: dict[str, Any], platform_file: Path, lake_folder: Path, lake_spark: Any,
              topic_factory: Callable[..., str]) -> Callable[..., LakeCase]:
    """``make(partitions=3, config=None, delivery="exact", writable=(), direct_producers=(),
    **lake_settings) -> LakeCase`` (``keep_raw_value=True`` names the case's topic); ``writable``: writable clusters that carry the topic too (created
    there, declared there); ``direct_producers``: services that write it on Kafka themselves (the
    lake then checks every record in full)."""

    def make(partitions: int = 3, config: dict[str, str] | None = None, delivery: str = "exact",
             writable: tuple[str, ...] = (), direct_producers: tuple[str, ...] = (), **lake: Any) -> LakeCase:
        topic = topic_factory("central", partitions, config)
        for cluster in writable:
            topic_factory(cluster, partitions, config, name=topic)
        path = lake_folder / f"platform-{topic}.yaml"
        data = lake_data(platform_data, platform_file, lake_folder, topic, partitions, lake, delivery,
                         ("central", *writable), direct_producers)
        return LakeCase(platform_variant(data, path), path, topic)

    return make


def produce(platform: Platform, topic: str, values: Iterable[bytes | dict[str, Any] | None],
            partition: int | None = None) -> list[tuple[int, int]]:
    """Produce to central and wait for every acknowledgement; (partition, offset) of each record."""
    producer = kafka.producer(platform, "central", f"lake-test-{uuid.uuid4().hex[:6]}")
    acked: list[tuple[int, int]] = []
    errors: list[Any] = []

    def delivered(err: Any, message: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked.append((message.partition(), message.offset()))

    for value in values:
        payload = orjson.dumps(value) if isinstance(value, dict) else value
        key = value["user_id"].encode() if isinstance(value, dict) and "user_id" in value else None
        extra = {} if partition is None else {"partition": partition}
        producer.produce(topic, payload, key=key, on_delivery=delivered, **extra)
        producer.poll(0)
    remaining = producer.flush(60)
    assert remaining == 0 and not errors, (remaining, errors)
    return acked


def rows_of(spark: Any, topic: str) -> list[Any]:
    return spark.table(data_table(topic)).collect()


def quarantine_of(spark: Any, topic: str) -> list[Any]:
    return spark.table(quarantine_table(topic)).orderBy("kafka_partition", "kafka_offset").collect()


@dataclass(frozen=True)
class GatewayLakeCase:
    """New topics on dc1 that take events through the gateway and that the lake lands straight from
    dc1, and the platform file that declares them."""

    platform: Platform
    path: Path
    #: contract name (a file in contracts/) -> topic
    topics: dict[str, str]


#: The demo service that produces each contract's topic.
PRODUCERS = {"ad-events": "adserver", "notifications": "notifier"}


def gateway_lake_case(platform_data: dict[str, Any], folder: Path, contracts: Iterable[str],
                      realtime: Callable[[dict[str, str]], dict[str, Any]] | None = None, via: str | None = None,
                      **lake: Any) -> GatewayLakeCase:
    """Declares and creates one new dc1 topic per contract; delete them with :func:`drop_topics`.
    ``realtime``: the pipeline's real-time settings, built from the topics (contract -> topic).
    ``via``: a route ``dc1-<via>`` copies the topics into that cluster and the lake lands them from
    there (the route's worker creates them there); else the lake lands them straight from dc1."""
    data = lake_data(platform_data, ROOT / "platform.yaml", folder, None, 0, {})
    topics = {contract: f"gw-{contract}-{uuid.uuid4().hex[:8]}" for contract in contracts}
    for contract, topic in topics.items():
        data["topics"][topic] = {"partitions": 3, "contract": str(ROOT / "contracts" / f"{contract}.schema.json"),
                                 "producers": [PRODUCERS[contract]], "consumers": ["lake"],
                                 "clusters": ["dc1", *([via] if via else [])]}
    if via is not None:
        data["routes"] = {f"dc1-{via}": {"source": "dc1", "destination": via, "topics": list(topics.values())}}
    data["pipeline"].update(source=via or "dc1", lake={"topics": list(topics.values()), **lake})
    if realtime is not None:
        data["pipeline"]["realtime"] = realtime(topics)
    path = folder / f"platform-{next(iter(topics.values()))}.yaml"
    platform = platform_variant(data, path)
    from confluent_kafka.admin import NewTopic

    admin = kafka.admin(platform, "dc1")
    for future in admin.create_topics([NewTopic(t, 3, 1) for t in topics.values()]).values():
        future.result(30)
    return GatewayLakeCase(platform, path, topics)


def drop_topics(case: GatewayLakeCase) -> None:
    """The case's topics, on every cluster that holds them."""
    for cluster in case.platform.clusters:
        admin = kafka.admin(case.platform, cluster)
        held = [t for t in case.topics.values() if t in admin.list_topics(timeout=10).topics]
        for future in admin.delete_topics(held).values() if held else ():
            future.result(30)


#: Every this many events, the chaos traffic sends one record that is not JSON, so the quarantine's
#: commit is killed too.
BAD_EVERY = 25


class ChaosTraffic:
    """Produces events (and every BAD_EVERY-th record not JSON) to the case's topic on central until
    stopped, BAD_EVERY events every ``pause`` seconds at most; remembers every acknowledged one."""

    def __init__(self, case: LakeCase, pause: float = 0.05) -> None:
        self.case, self.pause = case, pause
        self.good: list[str] = []
        self.bad: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, err: Any, message: Any) -> None:
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
            self._stop.wait(self.pause)
        assert producer.flush(60) == 0

    def __enter__(self) -> ChaosTraffic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(90)
        assert not self._thread.is_alive()


def lake_process(path: Path, log: Path) -> subprocess.Popen:
    """``conveyor lake run --once`` on ``path``, as its own process group: a kill of the group
    takes the Python driver and its JVM together, as a lost machine would."""
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "conveyor", "lake", "run", "--once", "--platform", str(path)],
            stdout=out, stderr=out, start_new_session=True, cwd=log.parent,
        )


def kill_driver(process: subprocess.Popen) -> bool:
    """SIGKILL the run's driver (its process group); True: the run is dead."""
    os.killpg(process.pid, signal.SIGKILL)
    return True


def _table_folders(case: LakeCase) -> dict[str, Path]:
    """Per table of the case's topic, the folder of its data files (a Hadoop catalog's warehouse)."""
    from conveyor.pipeline.catalog import local_warehouse

    warehouse = local_warehouse(case.platform)
    assert warehouse is not None
    return {data_table(case.topic): warehouse / "events" / case.topic / "data",
            quarantine_table(case.topic): warehouse / "quarantine" / case.topic / "data"}


def data_files(case: LakeCase) -> set[str]:
    """Every data file of the case's tables, referenced or not."""
    if case.stored_files is not None:
        return case.stored_files()
    return {str(p) for folder in _table_folders(case).values() for p in folder.rglob("*.parquet")}


def wrote_a_file(case: LakeCase, process: subprocess.Popen) -> bool:
    """Waits until the run has written a data file of the case's tables (True) or ended (False). A
    run's tasks write a file per partition and table one after another (one core) and commit after
    the last, so a kill at that moment lands between the first write and the commit."""
    before = data_files(case)
    while process.poll() is None:
        if data_files(case) - before:
            return True
        time.sleep(0.02)
    return False


def kill_driver_mid_write(case: LakeCase) -> Kill:
    """SIGKILL the run's driver as soon as it has written a data file."""
    return Kill("driver mid-write", lambda process: wrote_a_file(case, process) and kill_driver(process),
                timed=False)


@dataclass(frozen=True)
class Kill:
    """What a chaos run kills: ``strike(process)`` at the drawn moment; it returns True when it hit
    the run, False when the run ended before there was anything to kill. An untimed kill is struck
    as the run starts and waits for its own moment."""

    name: str
    strike: Callable[[subprocess.Popen], bool]
    timed: bool = True


@dataclass(frozen=True)
class RunOutcome:
    kill: str
    #: Seconds after the run's start the kill was aimed at (0: an untimed kill).
    delay: float
    #: The kill hit the run (False: the run finished first and does not count).
    hit: bool
    returncode: int


def killed_runs(path: Path, log: Path, rng: random.Random, kills: Sequence[Kill],
                timeout: float = 600) -> list[RunOutcome]:
    """Lake runs of ``path``, each struck by the next of ``kills``, until every kill has hit a run.

    A timed kill strikes at a moment drawn from ``rng`` within the time a whole run takes: one full
    run first measures it (when any kill is timed), a run that finishes before its kill is not
    counted, and the later kills aim within the shortest run seen (runs shorten as the first one's
    backlog is gone). A driver killed ends the run; a run whose executor was killed goes on, and its
    return code is kept."""
    duration = 0.0
    if any(kill.timed for kill in kills):
        started = time.monotonic()
        first = lake_process(path, log)
        assert first.wait(timeout) == 0, log.read_text()[-3000:]
        duration = time.monotonic() - started
    outcomes: list[RunOutcome] = []
    for kill in kills:
        while True:
            assert len(outcomes) < 3 * len(kills) + 2, f"runs keep finishing before their kill: {outcomes}"
            started = time.monotonic()
            process = lake_process(path, log)
            delay = rng.uniform(0.2 * duration, 0.8 * duration) if kill.timed else 0.0
            try:
                rc = process.wait(timeout=delay)
            except subprocess.TimeoutExpired:
                hit = kill.strike(process)
                rc = process.wait(timeout)
            else:
                hit = False
            if not hit and process.returncode == 0 and kill.timed:
                duration = min(duration, time.monotonic() - started)
            outcomes.append(RunOutcome(kill.name, round(delay, 1), hit, rc))
            if hit:
                break
    return outcomes


def assert_landed_once(spark: Any, case: LakeCase, traffic: ChaosTraffic, context: str) -> None:
    """The table holds exactly the acknowledged events, each once; the quarantine exactly the bad records."""
    landed = [r.event_id for r in rows_of(spark, case.topic)]
    assert len(landed) == len(traffic.good), context
    assert set(landed) == set(traffic.good), context
    assert sorted(bytes(q.raw_value) for q in quarantine_of(spark, case.topic)) == sorted(traffic.bad), context


def unreferenced_files(spark: Any, case: LakeCase) -> dict[str, list[str]]:
    """Per table of the case's topic, the data files on disk that no snapshot references."""
    found = {}
    for table, folder in _table_folders(case).items():
        files = spark.sql(f"SELECT file_path FROM {table}.all_data_files").collect()
        referenced = {r.file_path.removeprefix("file:") for r in files}
        found[table] = sorted({str(p) for p in folder.rglob("*.parquet")} - referenced)
    return found


@pytest.fixture(scope="session")
def postgres_server(platform_data: dict[str, Any]) -> Iterator[PostgresLayout]:
    """A PostgreSQL server for the session, started and stopped as `conveyor up` and `down` do."""
    port = int(os.environ.get("CONVEYOR_TEST_POSTGRES_PORT", platform_data["runtime"]["base_port"] - 2))
    # Not under pytest's folders: they are private to root (pytest resets their mode), and under
    # root the server runs as user postgres, which must reach its data.
    folder = Path(tempfile.mkdtemp(prefix="conveyor-postgres-"))
    folder.chmod(0o755)
    layout = PostgresLayout(port, "conveyor", "conveyor", folder / "server")
    try:
        postgres.start(layout)
        postgres.wait_ready(layout, time.monotonic() + 120)
        yield layout
    finally:
        postgres.stop(layout)
        shutil.rmtree(folder)



@pytest.fixture
def lake_database(postgres_server: PostgresLayout) -> PostgresLayout:
    """A database of its own on the session's server, for one test's JDBC catalog: the tests share
    the server, never a catalog (the lake's tables, ``ops.gaps`` among them, are named alike in every
    test, and a table another test left in another warehouse cannot be read through this one's)."""
    import psycopg2

    name = f"lake_{uuid.uuid4().hex[:12]}"
    connection = psycopg2.connect(host="127.0.0.1", port=postgres_server.port, user=postgres_server.user,
                                  dbname=postgres_server.database)
    try:
        connection.autocommit = True  # CREATE DATABASE cannot run inside a transaction
        with connection.cursor() as cursor:
            cursor.execute(f'CREATE DATABASE "{name}"')
    finally:
        connection.close()
    return replace(postgres_server, database=name)


def sql_catalog(server: PostgresLayout, warehouse: str, properties: dict[str, str] | None = None) -> Any:
    """pyiceberg's SQL catalog on the lake's JDBC catalog database: another client of the same
    tables (``properties`` for its file system)."""
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog("lake", uri=f"postgresql+psycopg2://{server.user}@127.0.0.1:{server.port}/{server.database}",
                      warehouse=warehouse, **(properties or {}))


def read_back(server: PostgresLayout, warehouse: str, topic: str,
              properties: dict[str, str] | None = None) -> tuple[list[str], int, list[str]]:
    """The table as another client sees it (:func:`sql_catalog`): its event_ids, how many commits
    were written but lost to the other run (snapshots outside main's ancestry), and main's lineage,
    newest first, for a failure's report."""
    catalog = sql_catalog(server, warehouse, properties)
    try:
        table = catalog.load_table(("events", topic))
        rows = table.scan(selected_fields=("event_id",)).to_arrow()
        ancestry, lineage, snapshot = set(), [], table.current_snapshot()
        while snapshot is not None:
            ancestry.add(snapshot.snapshot_id)
            summary = snapshot.summary
            lineage.append(f"{snapshot.snapshot_id} {summary.operation if summary else '?'} "
                           f"+{summary.get('added-records') if summary else '?'} "
                           f"-{summary.get('deleted-records') if summary else '?'} run {summary.get('conveyor.run-id')}")
            snapshot = table.snapshot_by_id(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None
        lost = len({s.snapshot_id for s in table.snapshots()} - ancestry)
        return rows.column("event_id").to_pylist(), lost, lineage
    finally:
        catalog.engine.dispose()


def read_back_columns(server: PostgresLayout, warehouse: str, topic: str) -> list[str]:
    """The table's columns as another client sees them."""
    catalog = sql_catalog(server, warehouse)
    try:
        return list(catalog.load_table(("events", topic)).schema().column_names)
    finally:
        catalog.engine.dispose()


#: A lake run as `conveyor lake run --once` makes it, which starts only once every racer's
#: Spark runs (a JVM starts in 10 to 60 s here): both then read the positions at the same moment.
_RACER = """
import os, sys, time
from pathlib import Path
from conveyor.config import load_resolved_platform
from conveyor.pipeline.lake import run_once
from conveyor.pipeline.spark import spark_session
platform = load_resolved_platform(sys.argv[1])
spark = spark_session(platform, "racer")
barrier = Path(sys.argv[2])
(barrier / str(os.getpid())).touch()
deadline = time.monotonic() + 600
while len(list(barrier.iterdir())) < int(sys.argv[3]) and time.monotonic() < deadline:
    time.sleep(0.02)
summary = run_once(spark, platform)
print(sys.argv[1], "landed", sum(t.landed for t in summary.topics))
"""


def racing_run(path: Path, barrier: Path, racers: int, log: Path) -> subprocess.Popen[bytes]:
    """One of ``racers`` lake runs of the platform file ``path`` that start reading together: each
    waits in the folder ``barrier`` until every racer's Spark is up."""
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, "-c", _RACER, str(path), str(barrier), str(racers)],
                                stdout=out, stderr=out)
