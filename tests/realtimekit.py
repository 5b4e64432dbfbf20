"""Fixtures and helpers of the real-time view tests (integration and chaos).

Each test gets a topic of its own on central, views over it named after the topic (so keys and job
state in the session's one Redis never meet another test's), a checkpoint folder and a side-output
topic of its own, all in a platform file of its own. Spark is the lake tests' session (one per process).
``redis_cluster`` runs a Redis Cluster of three masters for the tests that ask for one,
``replicated_redis_cluster`` one whose masters have a replica each, for a test that kills a master;
``lone_redis`` a Redis server of a test's own, for a test that wipes it; ``platform_redis`` one run
as the platform runs its own, for a test that restarts it. ``traffic_to`` sends ad events to a
case's topic while a block runs, ``start_job`` starts the views job as a process of its own.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import orjson
import pytest

from conveyor import kafka
from conveyor.config import Platform
from conveyor.pipeline.realtime.plan import is_counter
from conveyor.pipeline.realtime.store import RedisTarget, connect, connect_to
from conveyor.runtime.layout import RedisLayout
from conveyor.runtime.redis_access import WRITER, acl_file, passwords, redis_url
from conveyor.runtime.security import local_security, write_private
from tests.conftest import demo_event, eventually, platform_variant
from tests.lakekit import CONTRACT

WINDOW_SECONDS = 60


def views_of(topic: str, ctr_lateness: str, interest_lateness: str) -> dict[str, Any]:
    """The demo's two views over ``topic``, under names of the topic's own."""
    return {
        f"ctr-{topic}": {
            "topic": topic, "filter": {"type": ["impression", "click"]}, "group_by": ["banner_id"], "window": "1m",
            "metrics": {"impressions": {"where": {"type": "impression"}}, "clicks": {"where": {"type": "click"}},
                        "spend": {"sum": "price_micros"}},
            "ratios": {"ctr": ["clicks", "impressions"]}, "allowed_lateness": ctr_lateness, "ttl": "1d",
            "key": "t:{view}:{banner_id}:{window_start}",
        },
        f"interests-{topic}": {
            "topic": topic, "group_by": ["user_id", "category"], "window": "1h", "metrics": {"events": {}},
            "allowed_lateness": interest_lateness, "ttl": "1d", "key": "t:{view}:{user_id}:{window_start}",
        },
    }


#: The cluster's client ports are base_port + this and the next two; its bus ports the three after.
REDIS_CLUSTER_OFFSET = 600
#: A test's own Redis server listens on base_port + this (just after the cluster's ports).
LONE_REDIS_OFFSET = 606
#: A Redis run as the platform runs its own listens on base_port + this.
PLATFORM_REDIS_OFFSET = 607
#: A Redis Cluster with replicas: client ports base_port + this and the next five, bus ports the six after.
REPLICATED_CLUSTER_OFFSET = 650
#: The running cluster's URLs by first port: each test module importing the fixture instantiates it
#: again, and the first instance's cluster serves them all (it stops at the session's end).
_RUNNING: dict[int, list[str]] = {}


def _redis_binaries() -> tuple[str, str]:
    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if server is None or cli is None:
        pytest.fail("redis-server and redis-cli are not installed: run `apt-get install -y redis-server` (make setup)")
    return server, cli


@dataclass
class RunningCluster:
    """A Redis Cluster's processes by client port, and the views job's URLs (pipeline.realtime.redis)."""

    urls: list[str]
    processes: dict[int, subprocess.Popen]
    folder: Path


@contextmanager
def running_cluster(platform: Platform, folder: Path, first: int, masters: int = 3, replicas: int = 0,
                    options: tuple[str, ...] = ("--appendonly", "no")) -> Iterator[RunningCluster]:
    """redis-server nodes in cluster mode on 127.0.0.1 (``masters`` with ``replicas`` each, client
    ports from ``first``, each bus port ``masters * (1 + replicas)`` above), secured as the local
    runtime's Redis is (TLS with the local CA's certificate, the bus and replication too; the ACL
    file's users), joined by ``redis-cli --cluster create``; stopped after."""
    server, cli = _redis_binaries()
    material = local_security(platform.home)
    cert, key = material.server_certificate()
    tls = ["--tls-cert-file", str(cert), "--tls-key-file", str(key), "--tls-ca-cert-file", str(material.ca_cert),
           "--tls-auth-clients", "no"]
    held = passwords(material)
    # Joining the nodes takes CLUSTER ADDSLOTS and MEET, and a replica logs in to its master: this
    # fixture's user alone.
    admin = uuid.uuid4().hex
    acl = folder / "users.acl"
    write_private(acl, (acl_file(held) + f"user cluster-admin on #{hashlib.sha256(admin.encode()).hexdigest()} "
                                          "~* &* +@all\n").encode())
    as_admin = {**os.environ, "REDISCLI_AUTH": admin}
    cli_tls = ["--tls", "--cacert", str(material.ca_cert), "--user", "cluster-admin"]
    count = masters * (1 + replicas)
    ports = list(range(first, first + count))
    processes: dict[int, subprocess.Popen] = {}
    try:
        for port in ports:
            node = folder / str(port)
            node.mkdir()
            with (node / "redis.log").open("ab") as log:
                processes[port] = subprocess.Popen(
                    [server, "--port", "0", "--tls-port", str(port), *tls, "--tls-cluster", "yes",
                     "--tls-replication", "yes", "--aclfile", str(acl), "--cluster-port", str(port + count),
                     "--masteruser", "cluster-admin", "--masterauth", admin,
                     "--bind", "127.0.0.1", "--cluster-enabled", "yes", "--cluster-config-file", str(node / "nodes.conf"),
                     "--dir", str(node), "--save", "", *options],
                    stdout=log, stderr=log, start_new_session=True)
        for port in ports:
            eventually(lambda p=port: subprocess.run([cli, *cli_tls, "-p", str(p), "ping"], capture_output=True,
                                                     text=True, env=as_admin).stdout.strip() == "PONG",
                       30, f"redis on {port}")
        created = subprocess.run([cli, *cli_tls, "--cluster", "create", *(f"127.0.0.1:{p}" for p in ports),
                                  "--cluster-replicas", str(replicas), "--cluster-yes"], capture_output=True, text=True,
                                 timeout=60, env=as_admin)
        assert created.returncode == 0, created.stdout + created.stderr
        urls = [redis_url(p, WRITER, held[WRITER]) for p in ports]

        def ready() -> bool:
            client = connect_to(cluster_target(platform, urls))  # a new map of the cluster each time
            return client.cluster_info()["cluster_state"] == "ok" and len(client.get_replicas()) == masters * replicas

        eventually(ready, 60, "the Redis Cluster's state ok, every replica known")
        yield RunningCluster(urls, processes, folder)
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.terminate()
        for process in processes.values():
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture(scope="session")
def redis_cluster(platform: Platform, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """Three masters of a :func:`running_cluster`, no replicas, nothing kept on disk; yields the views
    job's URLs (what pipeline.realtime.redis takes) and stops them after."""
    first = platform.runtime.base_port + REDIS_CLUSTER_OFFSET
    if first in _RUNNING:
        yield _RUNNING[first]
        return
    with running_cluster(platform, tmp_path_factory.mktemp("redis-cluster"), first) as cluster:
        _RUNNING[first] = cluster.urls
        try:
            yield cluster.urls
        finally:
            _RUNNING.pop(first, None)


@pytest.fixture
def replicated_redis_cluster(platform: Platform, tmp_path: Path) -> Iterator[RunningCluster]:
    """Three masters with a replica each, every write in the append-only file before its reply (as the
    platform runs its Redis), a node judged failed after 5 s (Redis's default is 15)."""
    first = platform.runtime.base_port + REPLICATED_CLUSTER_OFFSET
    with running_cluster(platform, tmp_path, first, replicas=1,
                         options=("--appendonly", "yes", "--appendfsync", "always", "--cluster-node-timeout", "5000")
                         ) as cluster:
        yield cluster


def cluster_target(platform: Platform, urls: list[str]) -> RedisTarget:
    """The Redis Cluster of ``urls``, trusting the local CA that issued its nodes' certificate."""
    return RedisTarget(tuple(urls), cluster=True, ca=str(local_security(platform.home).ca_cert))


@pytest.fixture
def lone_redis(platform: Platform, tmp_path: Path) -> Iterator[str]:
    """A redis-server of this test's own (no persistence); yields its URL and stops it after."""
    server, cli = _redis_binaries()
    port = platform.runtime.base_port + LONE_REDIS_OFFSET
    with (tmp_path / "redis.log").open("ab") as log:
        process = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp_path),
                                    "--save", "", "--appendonly", "no"], stdout=log, stderr=log, start_new_session=True)
    try:
        eventually(lambda: subprocess.run([cli, "-p", str(port), "ping"], capture_output=True,
                                          text=True).stdout.strip() == "PONG", 30, f"redis on {port}")
        yield f"redis://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(30)


@dataclass
class PlatformRedis:
    """A redis-server started as ``conveyor up`` starts the platform's (TLS, the ACL file's users,
    the append-only file: LocalPlatform), in a folder of its own, for tests that stop and start it."""

    argv: list[str]
    folder: Path
    #: The views job's URL (the writer's credentials).
    url: str
    ca: str
    process: subprocess.Popen | None = None

    @property
    def log(self) -> Path:
        return self.folder / "redis.log"

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(self.argv, stdout=log, stderr=log, start_new_session=True)
        client = connect_to(RedisTarget((self.url,), ca=self.ca))
        eventually(lambda: client.ping(), 60, f"redis to load its data and answer ({self.log})",
                   errors=(Exception,))

    def stop(self, sig: int) -> None:
        assert self.process is not None and self.process.poll() is None, f"redis ended on its own: {self.log}"
        self.process.send_signal(sig)
        self.process.wait(60)

    def changes_since_rewrite(self) -> bytes:
        """The append-only file's increments: every write since the last rewrite."""
        return b"".join(p.read_bytes() for p in sorted((self.folder / "appendonlydir").glob("*.incr.aof")))


@pytest.fixture
def platform_redis(local: Any, tmp_path: Path) -> Iterator[PlatformRedis]:
    """A started :class:`PlatformRedis`; stopped after."""
    layout = RedisLayout(port=local.platform.runtime.base_port + PLATFORM_REDIS_OFFSET, dir=tmp_path / "redis")
    local.write_redis_users(layout)
    server = PlatformRedis(local.redis_argv(layout), layout.dir,
                           redis_url(layout.port, WRITER, passwords(local.security)[WRITER]), str(local.security.ca_cert))
    server.start()
    try:
        yield server
    finally:
        if server.process is not None and server.process.poll() is None:
            server.process.terminate()
            server.process.wait(30)


@dataclass(frozen=True)
class RealtimeCase:
    platform: Platform
    path: Path
    topic: str
    ctr: str
    interests: str
    rejects: str


@pytest.fixture
def realtime_case(platform_data: dict[str, Any], platform_file: Path, local_platform: Any,
                  topic_factory: Callable[..., str], tmp_path: Path) -> Callable[..., RealtimeCase]:
    """``make(partitions=3, ctr_lateness="1m", interest_lateness="10m", spark=None, contract=None, **realtime)
    -> RealtimeCase`` (``spark``: pipeline.spark settings, ``contract``: the topic's contract file in
    place of the demo's, ``realtime``: pipeline.realtime's)."""

    def make(partitions: int = 3, ctr_lateness: str = "1m", interest_lateness: str = "10m",
             spark: dict[str, Any] | None = None, contract: Path = CONTRACT, **settings: Any) -> RealtimeCase:
        topic = topic_factory("central", partitions)
        data = copy.deepcopy(platform_data)
        for spec in data["topics"].values():  # the file is written elsewhere: keep contracts found
            if spec.get("contract"):
                spec["contract"] = str(platform_file.parent / spec["contract"])
        data["topics"][topic] = {"partitions": partitions, "contract": str(contract), "clusters": ["central"]}
        rejects = f"{topic}-rejects"
        data["pipeline"]["spark"] = {**data["pipeline"].get("spark", {}), **(spark or {})}
        data["pipeline"]["realtime"] = {
            "checkpoint": str(tmp_path / "checkpoints"), "trigger": "500ms", "rejects_topic": rejects,
            "views": views_of(topic, ctr_lateness, interest_lateness), **settings,
        }
        path = tmp_path / "platform.yaml"
        return RealtimeCase(platform_variant(data, path), path, topic, f"ctr-{topic}", f"interests-{topic}", rejects)

    return make


def counters_in_redis(platform: Platform, view: str) -> dict[str, dict[str, int]]:
    """Every key of ``view`` -> its counters (without the batch guard)."""
    client = connect(platform)
    found = {}
    for key in client.scan_iter(match=f"t:{view}:*", count=1000):
        found[key] = {f: int(v) for f, v in client.hgetall(key).items() if is_counter(f)}
    return found


def minute_label(epoch_seconds: float, window: int = WINDOW_SECONDS) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(epoch_seconds - epoch_seconds % window))


def iso(epoch_seconds: float) -> str:
    return datetime.fromtimestamp(epoch_seconds, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def event_at(at: float, kind: str, user: str, banner: str | None = None, price: int | None = None) -> dict:
    extra = {k: v for k, v in (("banner_id", banner), ("price_micros", price)) if v is not None}
    return demo_event(event_time=iso(at), type=kind, user_id=user, category="travel", **extra)


def expected_counters(events: list[dict], ctr: str, interests: str) -> tuple[dict, dict]:
    """The views' counters, computed plainly from the events that must count."""
    banners: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    users: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for e in events:
        at = datetime.fromisoformat(e["event_time"]).timestamp()
        if e["type"] in ("impression", "click") and "banner_id" in e and not e.get("_late_ctr"):
            fields = banners[f"t:{ctr}:{e['banner_id']}:{minute_label(at)}"]
            fields["impressions" if e["type"] == "impression" else "clicks"] += 1
            fields["spend"] += e.get("price_micros", 0)
        if not e.get("_late_interests"):
            users[f"t:{interests}:{e['user_id']}:{minute_label(at, 3600)}"][f"events:{e['category']}"] += 1
    as_dicts = lambda d: {k: dict(v) for k, v in d.items()}  # noqa: E731
    return as_dicts(banners), as_dicts(users)


#: Every this many events, one record that is not JSON.
BAD_EVERY = 40
#: The share of events sent a second time when the traffic sends duplicates.
DUPLICATE_SHARE = 0.2


@dataclass
class Sent:
    """What the traffic got acknowledged: the events, and how many records were not JSON."""

    good: list[dict] = field(default_factory=list)
    bad: int = 0


def _produce(case: RealtimeCase, sent: Sent, stop: threading.Event, seed: int, duplicates: bool, partitions: int) -> None:
    """Ad events at about 400/s, stamped with the current time, until ``stop``; with ``duplicates``
    some are sent again, on a random partition, at once or up to 5 s later."""

    def delivered(err, message) -> None:
        assert err is None, err
        if message.value().startswith(b"broken-"):
            sent.bad += 1
        else:
            sent.good.append(orjson.loads(message.value()))

    producer = kafka.producer(case.platform, "central", "realtime-chaos-traffic")
    rng = random.Random(seed)
    copies: list[tuple[float, bytes]] = []  # (when to send, value)

    def send_copies(until: float) -> None:
        due = [c for c in copies if c[0] <= until]
        for _, value in due:
            producer.produce(case.topic, value, partition=rng.randrange(partitions), on_delivery=delivered)
        copies[:] = [c for c in copies if c[0] > until]

    while not stop.is_set():
        for _ in range(BAD_EVERY):
            kind = rng.choice(("impression", "impression", "impression", "click", "page_view"))
            banner = None if kind == "page_view" else f"b{rng.randrange(20)}"
            event = event_at(time.time(), kind, f"user-{rng.randrange(50)}", banner,
                             None if banner is None else rng.randrange(1, 1000))
            value = orjson.dumps(event)
            producer.produce(case.topic, value, key=event["user_id"].encode(), on_delivery=delivered)
            if duplicates and rng.random() < DUPLICATE_SHARE:
                copies.append((time.monotonic() + rng.choice((0.0, rng.uniform(0.5, 5.0))), value))
        producer.produce(case.topic, f"broken-{len(sent.good)}".encode(), on_delivery=delivered)
        send_copies(time.monotonic())
        producer.poll(0)
        stop.wait(0.1)
    send_copies(float("inf"))
    assert producer.flush(60) == 0


@contextmanager
def traffic_to(case: RealtimeCase, seed: int, duplicates: bool = False, partitions: int = 3) -> Iterator[Sent]:
    """Ad events at about 400/s into ``case``'s topic while the block runs, a record that is not JSON
    every BAD_EVERY (see :func:`_produce`); what was acknowledged."""
    sent, stop = Sent(), threading.Event()
    thread = threading.Thread(target=_produce, args=(case, sent, stop, seed, duplicates, partitions), daemon=True)
    thread.start()
    try:
        yield sent
    finally:
        stop.set()
        thread.join(90)
    assert not thread.is_alive()


def start_job(path: Path, log: Path, *extra: str, folder: Path | None = None) -> subprocess.Popen:
    """``folder``: the job's working folder, as a host of its own gives it (Spark's scratch space and
    Python's temporary files in it too)."""
    env = None
    if folder is not None:
        env = {**os.environ, "SPARK_LOCAL_DIRS": str(folder / "spark"), "TMPDIR": str(folder / "tmp")}
        (folder / "tmp").mkdir(parents=True)
    with log.open("ab") as out:
        # Its own session: the kill takes the Python driver and its JVM together, as a lost machine would.
        return subprocess.Popen([sys.executable, "-m", "conveyor", "views", "run", "--platform", str(path),
                                 *extra], stdout=out, stderr=out, start_new_session=True, cwd=folder, env=env)


def kill_session(process: subprocess.Popen) -> None:
    """SIGKILL every process of the job's session, as a pod's or a host's loss does, and wait until
    none lives: its process group holds the driver and its JVM, but PySpark's daemon leads a group of
    its own, and its Python workers would outlive a kill of the job's group (still writing) until the
    daemon notices."""
    def alive() -> list[int]:
        pids = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:  # /proc/<pid>/stat: "pid (comm) state ppid pgrp session ..."; comm may hold spaces
                state, _, _, session = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[:4]
            except (OSError, ValueError):
                continue  # gone meanwhile
            if int(session) == process.pid and state != "Z":
                pids.append(int(pid))
        return pids

    for pid in alive():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    process.wait()
    eventually(lambda: not alive(), 30, f"every process of the job's session {process.pid} to die")


def batches_logged(log: Path) -> int:
    """Batches the job logged (conveyor.service's text format: ``<time> INFO conveyor.realtime: batch 3: ...``;
    in real-time mode the driver's reports of what the tasks wrote, ``real-time 3: ...``)."""
    text = log.read_text(errors="replace")
    return text.count(" conveyor.realtime: batch ") + text.count(" conveyor.realtime: real-time ")
