"""Fixtures shared by the integration and chaos tests.

One session fixture brings up the demo platform (same platform.yaml, same contracts) in a
temporary folder on its own ports, so a demo running on this machine is left alone, and takes it
down at the end; the tests read the platform as the CLI does, with the resolved view that `up`
wrote laid over platform.yaml. Set CONVEYOR_TEST_PLATFORM to a platform file to run the same tests against
clusters that already run (the tests that kill brokers are then skipped: they need local ones).
"""

from __future__ import annotations

import copy
import os
import random
import shutil
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from hypothesis import HealthCheck, settings
from confluent_kafka.admin import NewTopic

from conveyor import kafka
from conveyor.config import Platform, load_platform, load_resolved_platform
from conveyor.runtime.local import LocalPlatform
from tests.processkit import stop_survivors

# No property test is timed: on two cores shared with brokers and Spark, an example can take
# 300 ms where it takes 2 alone (a deadline of 200 ms failed CI once).
settings.register_profile("conveyor", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("conveyor")

ROOT = Path(__file__).resolve().parents[1]
EXTERNAL = os.environ.get("CONVEYOR_TEST_PLATFORM")
T = TypeVar("T")

# Every JVM the suite starts (brokers, Spark drivers and executors, a standalone cluster) lives for
# minutes and carries little data, and on two cores CPU is what the suite waits for. Compiling with
# C1 alone takes about 40 % less CPU (a Spark session and a small job: 21 s of CPU against 12 s);
# the code C2 would make faster never runs long enough to pay for it. Benchmarks run without this.
# Brokers too: a six-JVM platform took 31-35 CPU-seconds to start with C1 alone against 50-63, and
# 14 % of a core idle three minutes on against 22 %. TLS costs more (AES-GCM encrypts 33 MB/s with
# C1 alone against 172; 300 MB of incompressible records through the brokers: 88 CPU-seconds
# against 36), but the suite's records are few, small and compressed.
os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1")


def eventually(check: Callable[[], T], timeout: float, what: str,
               errors: tuple[type[BaseException], ...] = (), interval: float = 0.1,
               detail: Callable[[], str] | None = None) -> T:
    """The first truthy value ``check()`` returns within ``timeout`` seconds; ``errors`` it raises
    meanwhile count as "not yet" (a topic the broker does not know yet). Fails naming ``what``, and
    what ``detail()`` says then (the last value seen)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except errors as err:
            value, last = None, err  # type: ignore[assignment]
        else:
            last = None
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout:g} s waiting for {what}" + (
            f" (last: {last!r})" if last is not None else "") + (f": {detail()}" if detail else "")
        time.sleep(interval)


@pytest.fixture(autouse=True)
def outlived_by_nothing() -> Iterator[None]:
    yield
    stop_survivors()


@pytest.fixture
def chaos_rng(request: pytest.FixtureRequest) -> random.Random:
    """The one source of random choices of a test that breaks things (what to kill, when, what to
    send). Seeded from CONVEYOR_CHAOS_SEED, else a new seed, which a failure's report names."""
    seed = int(os.environ.get("CONVEYOR_CHAOS_SEED", random.randrange(1 << 32)))
    request.node.user_properties.append(("chaos seed", seed))
    return random.Random(seed)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    seeds = [value for name, value in item.user_properties if name == "chaos seed"]
    if report.failed and seeds:
        report.sections.append(("chaos seed", f"seed {seeds[0]}: replay with CONVEYOR_CHAOS_SEED={seeds[0]}"))


#: Test files that each run every service of a platform under faults. They share one pytest-xdist
#: worker, one after the other: side by side, with the other worker's tests, their dozens of
#: processes and JVMs starve the two cores (a lake run then took minutes to start).
WHOLE_PLATFORM = ("tests/system/test_promise.py", "tests/chaos/deploy/test_host_loss.py")


#: The benches' smoke tests: each starts a platform of its own and none uses the session's.
BENCHES = "tests/integration/bench/"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The benches first: a worker starts its session platform at its first test that needs it and
    keeps it to the end, idling at a sixth of a core (docs/benchmarks.md, the suite's time); the
    benches, run before any, leave both cores to their own platforms."""
    items.sort(key=lambda item: not item.nodeid.startswith(BENCHES))


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` (make test) with the files of WHOLE_PLATFORM as one unit of work."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class WholePlatformTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return WHOLE_PLATFORM[0] if scope in WHOLE_PLATFORM else scope

    return WholePlatformTogether(config, log)


def base_port() -> int:
    """The session's first port: CONVEYOR_TEST_BASE_PORT (default 29092), 2,000 lower for each
    further pytest-xdist worker, so that parallel workers' clusters never share a port. A session
    uses ports from base_port - 600 (the secured cluster's; free_port's from base_port - 300) to base_port + 661 (a Redis Cluster with replicas)
    and the benches' from base_port + 700."""
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    return int(os.environ.get("CONVEYOR_TEST_BASE_PORT", "29092")) - 2000 * worker


_next_free = 0


def free_port() -> int:
    """A port for a server a test starts, from the worker's own 250 (base_port - 300 up to
    base_port - 50): below Linux's ephemeral range, so no client connection can take it between
    this probe and the server's bind, and never the same twice running within a worker."""
    global _next_free
    for _ in range(250):
        port = base_port() - 300 + _next_free
        _next_free = (_next_free + 1) % 250
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port from {base_port() - 300} to {base_port() - 51}")


@pytest.fixture(scope="session")
def platform_data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The demo platform file's content, pointed at a private folder and ports."""
    data = yaml.safe_load((Path(EXTERNAL) if EXTERNAL else ROOT / "platform.yaml").read_text())
    if not EXTERNAL:
        home = tmp_path_factory.mktemp("conveyor")
        data["runtime"]["home"] = str(home / "home")
        data["runtime"]["base_port"] = base_port()
        # A loaded CI machine starts six JVMs slowly; fail on a real fault, not on a busy host.
        data["runtime"]["start_timeout"] = 300
        # Every cluster runs as the demo's do, secured (SCRAM over TLS, the authorizer on;
        # docs/security.md); CONVEYOR_TEST_SECURITY=plaintext runs the same tests against them in clear.
        if os.environ.get("CONVEYOR_TEST_SECURITY"):
            for cluster in data["clusters"].values():
                cluster["security"] = os.environ["CONVEYOR_TEST_SECURITY"]
        # The demo's edges serve TLS; the session's serve in clear, so that a test's own gateways,
        # dispatcher nodes and dashboards take plain clients. The system test serves them with TLS
        # as the demo does, and tests/integration/test_edge_tls.py checks each edge's refusals.
        for edge in ("gateway", "dispatch", "ops"):
            data[edge].pop("tls", None)
        data["ops"]["components"] = {name: url.replace("https://", "http://")
                                     for name, url in data["ops"]["components"].items()}
        # Prometheus, Alertmanager and node_exporter on fixed ports would clash between workers, and
        # scrape for nothing: tests/integration/ops/test_ops_alerts.py starts its own.
        for monitor in ("prometheus", "alertmanager", "node_exporter"):
            data["runtime"].pop(monitor, None)
    return data


@pytest.fixture(scope="session")
def platform_file(platform_data: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    if EXTERNAL:
        return Path(EXTERNAL)
    folder = tmp_path_factory.mktemp("platform")
    shutil.copytree(ROOT / "contracts", folder / "contracts")
    path = folder / "platform.yaml"
    path.write_text(yaml.safe_dump(platform_data, sort_keys=False))
    return path


@pytest.fixture(scope="session")
def local_platform(platform_file: Path) -> Iterator[LocalPlatform | None]:
    """The running platform (None when the tests use existing clusters)."""
    if EXTERNAL:
        yield None
        return
    local = LocalPlatform(load_platform(platform_file))
    try:
        local.up()
        yield local
    finally:
        local.down()


@pytest.fixture(scope="session")
def platform(platform_file: Path, local_platform: LocalPlatform | None) -> Platform:
    """The platform as the CLI loads it: once the local one runs, with the view `up` wrote."""
    return load_resolved_platform(platform_file)


@pytest.fixture
def local(local_platform: LocalPlatform | None) -> LocalPlatform:
    """For tests that stop and start brokers: they need clusters of their own."""
    if local_platform is None:
        pytest.skip("kills brokers: needs the local platform, not CONVEYOR_TEST_PLATFORM")
    return local_platform


@pytest.fixture
def topic_factory(platform: Platform, local_platform: LocalPlatform | None) -> Iterator[Callable[..., str]]:
    """Creates uniquely named topics (replication from the cluster's defaults) and deletes them after."""
    created: list[tuple[str, str]] = []

    def create(cluster: str, partitions: int = 3, config: dict[str, str] | None = None, name: str | None = None) -> str:
        name = name or f"test-{uuid.uuid4().hex[:10]}"
        spec = platform.cluster(cluster)
        configs = {"min.insync.replicas": str(spec.default_min_insync), **(config or {})}
        topic = NewTopic(name, partitions, spec.default_replication_factor, config=configs)
        admin = kafka.admin(platform, cluster)  # kept referenced until the future resolves
        admin.create_topics([topic])[name].result()
        created.append((cluster, name))
        return name

    yield create
    for cluster, name in created:
        admin = kafka.admin(platform, cluster)
        admin.delete_topics([name])[name].result()


@pytest.fixture(scope="session")
def provisioned(platform: Platform, local_platform: LocalPlatform | None) -> Platform:
    """The platform with every declared topic on every cluster."""
    from conveyor.acls import provisioner as acls
    from conveyor.topics import provisioner

    provisioner.apply(platform, provisioner.plan(platform))
    acls.apply_secured(platform)
    return platform


def platform_variant(data: dict[str, Any], path: Path) -> Platform:
    """A variant of the session's platform (its own routes, topics, settings) written to ``path``
    for processes the test starts, with the users and ACLs its parts need on secured clusters
    granted: what `topics apply` does after an edit of platform.yaml."""
    from conveyor.acls import provisioner as acls
    from conveyor.cli.common import platform_to_apply

    path.write_text(yaml.safe_dump(data, sort_keys=False))
    # With the SCRAM users the variant asks for now (a service writing directly), as `topics apply` makes them.
    acls.apply_secured(platform_to_apply(path, keep=False))
    return load_resolved_platform(path)


def without_registry_topic(platform_data: dict[str, Any], platform_file: Path, path: Path) -> Platform:
    """The session's platform whose contract registry topic is declared but never created."""
    data = copy.deepcopy(platform_data)
    for spec in data["topics"].values():
        if spec.get("contract"):
            spec["contract"] = str(platform_file.parent / spec["contract"])
    missing = f"_contracts_{uuid.uuid4().hex[:8]}"
    data["topics"][missing] = {**data["topics"]["_contracts"]}
    data["contracts"] = {"topic": missing}
    return platform_variant(data, path)


def logs_dc2_variant(platform_data: dict[str, Any], platform_file: Path, path: Path,
                     **settings: Any) -> Platform:
    """The session's platform with dc2 serving logs (``settings`` laid over its cluster, and the
    top-level sections given as ``gateway=...``), written to ``path`` as `platform_variant` does."""
    data = copy.deepcopy(platform_data)
    for spec in data["topics"].values():
        if spec.get("contract"):
            spec["contract"] = str(platform_file.parent / spec["contract"])
    gateway = settings.pop("gateway", None)
    data["clusters"]["dc2"] = {**data["clusters"]["dc2"], "purpose": "logs", **settings}
    data["clusters"]["dc2"].pop("failover", None)  # a logs cluster sheds instead of failing over
    if gateway is not None:
        data["gateway"] = {**data.get("gateway", {}), **gateway}
    return platform_variant(data, path)


@pytest.fixture
def serve_gateway() -> Iterator[Callable[..., str]]:
    """Runs gateways on free ports (real uvicorn servers in threads); returns their base URLs.
    Each is stopped, with its last audit counts published, at the end of the test."""
    import threading

    import uvicorn

    from conveyor.config.tls import Tls
    from conveyor.gateway.app import Gateway, create_app
    from conveyor.gateway.server import gateway_server
    from conveyor.tls import base_url, server_tls, uvicorn_tls

    servers: list[tuple[uvicorn.Server, threading.Thread]] = []

    def serve(platform: Platform, dc: str, tls: Tls | None = None, port: int | None = None) -> str:
        """``tls``: serve HTTPS with it (``Tls()``: a certificate from the platform's local CA);
        ``port``: listen there (default: a free port)."""
        port = port or free_port()
        gateway = Gateway(platform, dc)
        server = gateway_server(create_app(gateway), gateway.settings, gateway.metrics.registry, "127.0.0.1", port,
                                **uvicorn_tls(server_tls(platform, tls)))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        def started() -> bool:
            assert thread.is_alive(), "the gateway's server thread ended before it started"
            return server.started

        eventually(started, 30, "the gateway to start", interval=0.05)
        servers.append((server, thread))
        serve.gateways[base_url(tls, port)] = gateway  # type: ignore[attr-defined]
        return base_url(tls, port)

    serve.gateways = {}  # type: ignore[attr-defined]
    yield serve
    for server, thread in servers:
        server.should_exit = True
        thread.join(60)


def demo_event(**overrides: Any) -> dict[str, Any]:
    """A valid ad event with a fresh event_id."""
    import datetime as dt

    event = {"event_id": str(uuid.uuid4()), "type": "impression", "site_id": "site-1", "user_id": "user-1",
             "event_time": dt.datetime.now(dt.timezone.utc).isoformat().replace("+00:00", "Z")}
    return {**event, **overrides}


def read_topic(platform: Platform, cluster: str, topic: str, timeout: float = 30.0) -> list[Any]:
    """Every message of ``topic`` on ``cluster`` up to its current end offsets."""
    import time

    from confluent_kafka import TopicPartition

    consumer = kafka.consumer(platform, cluster, f"test-read-{uuid.uuid4().hex[:8]}", "test-read")
    admin = kafka.admin(platform, cluster)
    partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions}
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    positions = dict.fromkeys(partitions, 0)
    messages = []
    deadline = time.monotonic() + timeout
    try:
        while any(positions[p] < ends[p] for p in partitions):
            assert time.monotonic() < deadline, f"could not read {topic} on {cluster} to its end"
            for message in consumer.consume(1000, 0.5):
                assert message.error() is None, message.error()
                if message.offset() < ends[message.partition()]:
                    messages.append(message)
                positions[message.partition()] = message.offset() + 1
    finally:
        consumer.close()
    return messages


def wait_full_isr(platform: Platform, topic: str, timeout: float = 60) -> None:
    """Until every partition of ``topic`` on central has its 3 replicas in sync again (a broker
    brought back by a test, before the next test uses the cluster)."""
    eventually(lambda: all(len(p.isrs) == 3 for p in kafka.admin(platform, "central").list_topics(
        topic, timeout=10).topics[topic].partitions.values()), timeout, f"{topic}'s ISRs to return to 3 replicas",
        interval=0.5)


def padded_to(event: dict[str, Any], size: int) -> dict[str, Any]:
    """``event`` with a ``padding`` field that makes its key (``user_id``, the ad contract's) and
    value take exactly ``size`` bytes together."""
    import orjson

    padded = {**event, "padding": ""}
    padded["padding"] = "p" * (size - len(padded["user_id"].encode()) - len(orjson.dumps(padded)))
    return padded
