"""Fixtures and helpers of the real-time view tests (integration and chaos).

Each test gets a topic of its own on central, views over it named after the topic (so keys and job
state in the session's one Redis never meet another test's), a checkpoint folder and a side-output
topic of its own, all in a platform file of its own. Spark is the lake tests' session (one per process).
``redis_cluster`` runs a Redis Cluster of three masters for the tests that ask for one;
``lone_redis`` a Redis server of a test's own, for a test that wipes it.
"""

from __future__ import annotations

import copy
import hashlib
import os
import shutil
import subprocess
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from conveyor.config import Platform
from conveyor.pipeline.realtime.plan import is_counter
from conveyor.pipeline.realtime.store import RedisTarget, connect, connect_to
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
#: The running cluster's URLs by first port: each test module importing the fixture instantiates it
#: again, and the first instance's cluster serves them all (it stops at the session's end).
_RUNNING: dict[int, list[str]] = {}


def _redis_binaries() -> tuple[str, str]:
    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if server is None or cli is None:
        pytest.fail("redis-server and redis-cli are not installed: run `apt-get install -y redis-server` (make setup)")
    return server, cli


@pytest.fixture(scope="session")
def redis_cluster(platform: Platform, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """Three redis-server masters in cluster mode on 127.0.0.1, secured as the local runtime's Redis
    is (TLS with the local CA's certificate, the bus too; the ACL file's users), joined by
    ``redis-cli --cluster create``; yields the views job's URLs (what pipeline.realtime.redis takes)
    and stops them after."""
    first = platform.runtime.base_port + REDIS_CLUSTER_OFFSET
    if first in _RUNNING:
        yield _RUNNING[first]
        return
    server, cli = _redis_binaries()
    material = local_security(platform.home)
    cert, key = material.server_certificate()
    tls = ["--tls-cert-file", str(cert), "--tls-key-file", str(key), "--tls-ca-cert-file", str(material.ca_cert),
           "--tls-auth-clients", "no"]
    folder = tmp_path_factory.mktemp("redis-cluster")
    held = passwords(material)
    admin = uuid.uuid4().hex  # joining the nodes takes CLUSTER ADDSLOTS and MEET: this fixture's alone
    acl = folder / "users.acl"
    write_private(acl, (acl_file(held) + f"user cluster-admin on #{hashlib.sha256(admin.encode()).hexdigest()} "
                                          "~* &* +@all\n").encode())
    as_admin = {**os.environ, "REDISCLI_AUTH": admin}
    cli_tls = ["--tls", "--cacert", str(material.ca_cert), "--user", "cluster-admin"]
    ports = [first, first + 1, first + 2]
    processes = []
    try:
        for port in ports:
            node = folder / str(port)
            node.mkdir()
            with (node / "redis.log").open("ab") as log:
                processes.append(subprocess.Popen(
                    [server, "--port", "0", "--tls-port", str(port), *tls, "--tls-cluster", "yes",
                     "--tls-replication", "yes", "--aclfile", str(acl), "--cluster-port", str(port + 3),
                     "--bind", "127.0.0.1", "--cluster-enabled", "yes", "--cluster-config-file", str(node / "nodes.conf"),
                     "--dir", str(node), "--save", "", "--appendonly", "no"],
                    stdout=log, stderr=log, start_new_session=True))
        for port in ports:
            eventually(lambda p=port: subprocess.run([cli, *cli_tls, "-p", str(p), "ping"], capture_output=True,
                                                     text=True, env=as_admin).stdout.strip() == "PONG",
                       30, f"redis on {port}")
        created = subprocess.run([cli, *cli_tls, "--cluster", "create", *(f"127.0.0.1:{p}" for p in ports),
                                  "--cluster-replicas", "0", "--cluster-yes"], capture_output=True, text=True,
                                 timeout=60, env=as_admin)
        assert created.returncode == 0, created.stdout + created.stderr
        urls = [redis_url(p, WRITER, held[WRITER]) for p in ports]
        client = connect_to(cluster_target(platform, urls))
        eventually(lambda: client.cluster_info()["cluster_state"] == "ok", 60, "the Redis Cluster's state ok")
        _RUNNING[first] = urls
        yield urls
    finally:
        _RUNNING.pop(first, None)
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


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
    """``make(partitions=3, ctr_lateness="1m", interest_lateness="10m", spark=None, **realtime) -> RealtimeCase``
    (``spark``: pipeline.spark settings, ``realtime``: pipeline.realtime's)."""

    def make(partitions: int = 3, ctr_lateness: str = "1m", interest_lateness: str = "10m",
             spark: dict[str, Any] | None = None, **settings: Any) -> RealtimeCase:
        topic = topic_factory("central", partitions)
        data = copy.deepcopy(platform_data)
        for spec in data["topics"].values():  # the file is written elsewhere: keep contracts found
            if spec.get("contract"):
                spec["contract"] = str(platform_file.parent / spec["contract"])
        data["topics"][topic] = {"partitions": partitions, "contract": str(CONTRACT), "clusters": ["central"]}
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
    import time

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
