"""The local platform: every cluster platform.yaml gives no bootstrap as real KRaft brokers, plus
Redis, and PostgreSQL, Prometheus, Alertmanager and node_exporter when ``runtime`` asks for them.

``LocalPlatform`` is what ``conveyor up``, ``down`` and ``status`` drive, and what the test
fixtures and chaos tests use to kill and restart single brokers. It takes platform.yaml as written;
``up`` writes the resolved view (conveyor.runtime.endpoints) that everything else reads, and
:attr:`LocalPlatform.clients` is the platform with it. Constructing it does no I/O.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import redis
from confluent_kafka import KafkaException

from conveyor import kafka
from conveyor.acls.provisioner import apply_secured
from conveyor.config import Platform, Security
from conveyor.config.resolved import ResolvedView, resolved_view_file, with_resolved_view, write_resolved_view
from conveyor.jars import Jars, java_binary, resolve_jars
from conveyor.runtime import monitoring, postgres, processes
from conveyor.runtime.endpoints import resolved_view
from conveyor.runtime.errors import NodeFailedError, RuntimeSetupError, StartTimeoutError
from conveyor.runtime.layout import ClusterLayout, Node, RedisLayout, plan_layout, redis_layout
from conveyor.runtime.monitoring import Monitor
from conveyor.runtime.postgres import PostgresLayout, postgres_layout
from conveyor.runtime.processes import Daemon
from conveyor.runtime.properties import render, server_properties
from conveyor.runtime.redis_access import READER, acl_file, passwords, redis_url
from conveyor.runtime.security import (ADMIN_USER, SCRAM_MECHANISM, LocalSecurity, argument_file, local_security,
                                       owner_only_file, write_private)
from conveyor.runtime.services import service_daemons

_HERE = Path(__file__).parent
LOG4J_CONFIG = _HERE / "log4j2.properties"
JMX_EXPORTER_CONFIG = _HERE / "jmx-exporter.yaml"

#: Called as progress(step, completed, total) while ``up`` works.
Progress = Callable[[str, int, int], None]


def _no_progress(step: str, completed: int, total: int) -> None:
    return None


@dataclass(frozen=True)
class NodeState:
    node: Node
    pid: int | None

    @property
    def running(self) -> bool:
        return self.pid is not None


@dataclass(frozen=True)
class ClusterState:
    layout: ClusterLayout
    nodes: tuple[NodeState, ...]

    @property
    def brokers_running(self) -> int:
        return sum(1 for s in self.nodes if s.node.is_broker and s.running)


@dataclass(frozen=True)
class RedisState:
    layout: RedisLayout
    pid: int | None


@dataclass(frozen=True)
class PostgresState:
    layout: PostgresLayout
    pid: int | None


@dataclass(frozen=True)
class PlatformState:
    clusters: tuple[ClusterState, ...]
    redis: RedisState | None
    #: Names of the processes this call started (empty when everything already ran).
    started: tuple[str, ...] = ()
    postgres: PostgresState | None = None
    #: Prometheus, Alertmanager and node_exporter, when platform.yaml asks for them, with their pids.
    monitors: tuple[tuple[Monitor, int | None], ...] = ()

    @property
    def all_running(self) -> bool:
        return all(s.running for c in self.clusters for s in c.nodes) and all(
            s.pid is not None for s in (self.redis, self.postgres) if s is not None
        ) and all(pid is not None for _, pid in self.monitors)


#: What a broker logs when a client's SCRAM password is not the one it stores for the user.
_REFUSED = "Authentication failed during authentication due to invalid credentials"


def refuses_credentials(server_log: Path, tail_bytes: int = 200_000) -> bool:
    """Whether the end of a broker's server.log shows it refusing clients' SCRAM credentials."""
    try:
        with server_log.open("rb") as file:
            file.seek(max(0, server_log.stat().st_size - tail_bytes))
            return _REFUSED.encode() in file.read()
    except OSError:
        return False


class LocalPlatform:
    def __init__(self, platform: Platform, maven_repo: Path | None = None) -> None:
        self.platform = platform
        self.layouts = plan_layout(platform)
        self.redis = redis_layout(platform)
        self.postgres = postgres_layout(platform)
        #: The secured clusters' TLS and SASL material and the edges' certificate, made at the first ``up``.
        self.security: LocalSecurity = local_security(platform.home)
        self.secured = [layout.name for layout in self.layouts if layout.cluster.security == Security.sasl_ssl]
        self._maven_repo = maven_repo
        self._jars: Jars | None = None
        self._clients: Platform | None = None

    @property
    def clients(self) -> Platform:
        """The platform with the resolved view of what this one starts: what its own clients, and
        anyone in this process, connect with. Needs the material of the first ``up``."""
        if self._clients is None:
            self._clients = with_resolved_view(self.platform, self.view())
        return self._clients

    def view(self) -> ResolvedView:
        """The resolved view of what this platform starts."""
        return resolved_view(self.platform, self.layouts, self.redis, self.postgres, self.security)

    def write_view(self) -> Path:
        """Write the resolved view of what this platform starts, for every process that loads
        platform.yaml (``up`` does, before anything connects)."""
        return write_resolved_view(self.platform, self.view())

    # -- daemons -------------------------------------------------------------------------------

    def jars(self) -> Jars:
        if self._jars is None:
            self._jars = resolve_jars(self._maven_repo)
        return self._jars

    def layout(self, cluster: str) -> ClusterLayout:
        for layout in self.layouts:
            if layout.name == cluster:
                return layout
        raise KeyError(f"{cluster} is not a local cluster of this platform")

    def node_daemon(self, node: Node) -> Daemon:
        return Daemon(node.name, node.pid_file, node.console_log, f"-Dconveyor.node={node.dir}")

    def node_argv(self, node: Node) -> list[str]:
        heap = self.platform.runtime.broker_heap if node.is_broker else self.platform.runtime.controller_heap
        jars = self.jars()
        return [
            java_binary(),
            f"-Xms{heap}",
            f"-Xmx{heap}",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            # Two cores shared by several JVMs: keep each one's helper threads few.
            "-XX:ParallelGCThreads=1",
            "-XX:ConcGCThreads=1",
            "-XX:CICompilerCount=2",
            "-Djava.awt.headless=true",
            f"-Dkafka.logs.dir={node.log_dir}",
            f"-Dlog4j2.configurationFile={LOG4J_CONFIG}",
            self.node_daemon(node).marker,
            f"-javaagent:{jars.jmx_agent}=127.0.0.1:{node.metrics_port}:{JMX_EXPORTER_CONFIG}",
            "-cp",
            jars.classpath,
            "kafka.Kafka",
            str(node.properties_file),
        ]

    def redis_daemon(self) -> Daemon | None:
        if self.redis is None:
            return None
        # Redis rewrites its process title to "redis-server 127.0.0.1:<port>".
        return Daemon("redis", self.redis.pid_file, self.redis.console_log, f"127.0.0.1:{self.redis.port}")

    def redis_argv(self, layout: RedisLayout) -> list[str]:
        server = shutil.which("redis-server")
        if server is None:
            raise RuntimeSetupError(
                "redis-server is not installed: run `apt-get install -y redis-server` (make setup does it)"
            )
        cert, key = self.security.server_certificate()
        return [
            server,
            "--bind", "127.0.0.1",
            # TLS only, with the local CA's certificate; users and passwords from the ACL file
            # (conveyor.runtime.redis_access).
            "--port", "0",
            "--tls-port", str(layout.port),
            "--tls-cert-file", str(cert), "--tls-key-file", str(key),
            "--tls-ca-cert-file", str(self.security.ca_cert), "--tls-auth-clients", "no",
            "--aclfile", str(layout.acl_file),
            "--dir", str(layout.dir),
            # Counters in real-time views must survive a restart, a SIGKILL included: every write
            # is in the append-only file before its reply. With fsync once a second, Redis may hold
            # writes back for up to 2 s while an fsync runs, and still answer them.
            "--appendonly", "yes",
            "--appendfsync", "always",
            "--save", "",
            "--protected-mode", "yes",
            "--daemonize", "no",
        ]

    def write_redis_users(self, layout: RedisLayout) -> None:
        """The folder of a Redis in ``layout`` and its ACL file (conveyor.runtime.redis_access)."""
        layout.dir.mkdir(parents=True, exist_ok=True)
        write_private(layout.acl_file, acl_file(passwords(self.security)).encode())

    def _all_node_daemons(self) -> list[tuple[Node, Daemon]]:
        return [(node, self.node_daemon(node)) for layout in self.layouts for node in layout.nodes]

    # -- state ---------------------------------------------------------------------------------

    def state(self, started: tuple[str, ...] = ()) -> PlatformState:
        clusters = tuple(
            ClusterState(layout, tuple(NodeState(n, processes.running_pid(self.node_daemon(n))) for n in layout.nodes))
            for layout in self.layouts
        )
        redis_state = None
        daemon = self.redis_daemon()
        if self.redis is not None and daemon is not None:
            redis_state = RedisState(self.redis, processes.running_pid(daemon))
        postgres_state = None
        if self.postgres is not None:
            postgres_state = PostgresState(self.postgres, processes.running_pid(self.postgres.daemon))
        found = tuple((m, processes.running_pid(m.daemon)) for m in monitoring.monitors(self.platform))
        return PlatformState(clusters, redis_state, started, postgres_state, found)

    # -- up ------------------------------------------------------------------------------------

    def up(self, progress: Progress = _no_progress) -> PlatformState:
        """Start whatever is not running yet and wait until every cluster has all its brokers."""
        progress("Resolving Kafka jars (Maven Central)", 0, 1)
        self.jars()
        progress("Resolving Kafka jars (Maven Central)", 1, 1)
        self.security.ensure()
        redis_argv = self.redis_argv(self.redis) if self.redis is not None else None

        self.write_view()
        missing = [(n, d) for n, d in self._all_node_daemons() if processes.running_pid(d) is None]
        self._format([n for n, _ in missing], progress)

        started = []
        for i, (node, daemon) in enumerate(missing):
            progress("Starting Kafka nodes", i, len(missing))
            self._write_properties(node)
            processes.start(daemon, self.node_argv(node))
            started.append(node.name)
        progress("Starting Kafka nodes", len(missing), len(missing))

        redis_daemon = self.redis_daemon()
        if self.redis is not None and redis_daemon and redis_argv and processes.running_pid(redis_daemon) is None:
            self.write_redis_users(self.redis)
            processes.start(redis_daemon, redis_argv)
            started.append("redis")
        if self.postgres is not None and postgres.start(self.postgres):
            started.append("postgres")

        self.wait_ready(progress)
        if self.secured:
            apply_secured(self.clients, self.secured)
        # After the brokers: their pages and the certificate's authority go into Prometheus's scrapes.
        started += monitoring.start(self.clients)
        monitoring.wait_ready(self.platform, time.monotonic() + self.platform.runtime.start_timeout)
        return self.state(tuple(started))

    def _format(self, nodes: list[Node], progress: Progress) -> None:
        """Format KRaft storage with Kafka's StorageTool, once per node, in parallel."""
        todo = [n for n in nodes if not (n.data_dir / "meta.properties").exists()]
        if not todo:
            return
        jars, java = self.jars(), java_binary()

        def format_one(node: Node) -> None:
            node.log_dir.mkdir(parents=True, exist_ok=True)
            self._write_properties(node)
            layout = self.layout(node.cluster)
            command = ["kafka.tools.StorageTool", "format", "-t", layout.cluster_id, "-c", str(node.properties_file),
                       "--ignore-formatted"]
            if layout.cluster.security == Security.sasl_ssl:
                # The super user's SCRAM credential is in the metadata from the start: brokers
                # authenticate to each other with it before any client could create one.
                command += ["--add-scram", f"{SCRAM_MECHANISM}=[name={ADMIN_USER},password={self.security.admin_password}]"]
            # The main class and its arguments go in an owner-only argument file, which the java
            # launcher expands: on its command line the password would show in `ps`.
            with owner_only_file(node.log_dir / "storage-format.args", argument_file(command)) as args:
                result = subprocess.run(
                    [java, "-Xmx128m", "-XX:TieredStopAtLevel=1", f"-Dlog4j2.configurationFile={LOG4J_CONFIG}",
                     f"-Dkafka.logs.dir={node.log_dir}", "-cp", jars.classpath, f"@{args}"],
                    capture_output=True, text=True,
                )
            if result.returncode != 0:
                raise NodeFailedError(f"formatting storage of {node.name} failed:\n{result.stdout}{result.stderr}")

        done = 0
        progress("Formatting KRaft storage", 0, len(todo))
        with ThreadPoolExecutor(max_workers=2) as pool:
            for _ in pool.map(format_one, todo):
                done += 1
                progress("Formatting KRaft storage", done, len(todo))

    def _write_properties(self, node: Node) -> None:
        text = render(server_properties(self.layout(node.cluster), node, self.security))
        # A secured node's file holds its key store's password and the admin's: its owner's only.
        node.properties_file.touch(mode=0o600)
        node.properties_file.write_text(text)

    def wait_ready(self, progress: Progress = _no_progress, timeout: float | None = None) -> None:
        """Wait until every cluster reports all its brokers and every metrics endpoint answers."""
        timeout = timeout or self.platform.runtime.start_timeout
        deadline = time.monotonic() + timeout
        total = sum(len(layout.brokers) for layout in self.layouts)
        pending = {layout.name: layout for layout in self.layouts}
        ready = 0
        while pending:
            progress("Waiting for brokers", ready, total)
            self._fail_if_dead()
            for name, layout in list(pending.items()):
                if len(self._brokers_registered(name)) >= len(layout.brokers) and all(
                    _metrics_up(n) for n in layout.nodes
                ):
                    ready += len(layout.brokers)
                    del pending[name]
            if pending and time.monotonic() > deadline:
                names = ", ".join(pending)
                logs = [n.log_dir / "server.log" for layout in pending.values() for n in layout.nodes]
                hint = (f"; their brokers refuse the platform's own SCRAM credentials (a home made with "
                        f"other passwords): stop them (`conveyor down`) and start from an empty "
                        f"{self.platform.home} (`make clean`)" if any(refuses_credentials(log) for log in logs)
                        else f"; see server.log under {self.platform.home}")
                raise StartTimeoutError(f"clusters {names} did not report all their brokers within {timeout:.0f} s{hint}")
            if pending:
                time.sleep(0.5)
        progress("Waiting for brokers", total, total)
        if self.redis is not None:
            self._wait_redis(deadline)
        if self.postgres is not None:
            postgres.wait_ready(self.postgres, deadline)

    def _brokers_registered(self, cluster: str) -> set[int]:
        # A broker still starting refuses connections: expected here, so librdkafka stays quiet.
        admin = kafka.admin(self.clients, cluster, {"socket.connection.setup.timeout.ms": 2000, "log_level": 0})
        try:
            # Metadata, not DescribeCluster: librdkafka aborts the process on some DescribeCluster
            # answers of a broker still starting (see conveyor.topics.provisioner.snapshot).
            return set(admin.list_topics(timeout=3).brokers)
        except KafkaException:
            return set()

    def _fail_if_dead(self, nodes: list[Node] | None = None) -> None:
        for node in nodes if nodes is not None else [n for layout in self.layouts for n in layout.nodes]:
            daemon = self.node_daemon(node)
            if processes.running_pid(daemon) is None:
                server_log = node.log_dir / "server.log"
                tail = processes.log_tail(daemon)
                if server_log.exists():
                    tail += "\n" + "\n".join(server_log.read_text(errors="replace").splitlines()[-15:])
                raise NodeFailedError(f"{node.name} exited while starting:\n{tail}")

    def _wait_redis(self, deadline: float) -> None:
        assert self.redis is not None
        client = redis.Redis.from_url(redis_url(self.redis.port, READER, passwords(self.security)[READER]),
                                      socket_connect_timeout=1, ssl_ca_certs=str(self.security.ca_cert))
        while True:
            try:
                client.ping()
                return
            except (redis.ConnectionError, redis.AuthenticationError):
                if time.monotonic() > deadline:
                    raise StartTimeoutError(f"redis did not answer on {self.redis.url}") from None
                time.sleep(0.2)

    # -- down and single nodes -----------------------------------------------------------------

    def down(self, timeout: float = 30.0) -> list[str]:
        """Stop exactly the processes this platform started: Conveyor's services first (they drain
        into Kafka), then brokers (a controlled shutdown needs the controller), then controllers,
        then Prometheus, Alertmanager and node_exporter, Redis and PostgreSQL."""
        nodes = self._all_node_daemons()
        stopped = processes.stop(service_daemons(self.platform), timeout)
        stopped += processes.stop([d for n, d in nodes if n.is_broker], timeout)
        stopped += processes.stop([d for n, d in nodes if not n.is_broker], timeout)
        stopped += monitoring.stop(self.platform, timeout)
        redis_daemon = self.redis_daemon()
        if redis_daemon is not None:
            stopped += processes.stop([redis_daemon], timeout)
        if self.postgres is not None:
            stopped += postgres.stop(self.postgres, timeout)
        # The view describes what runs: without it, a command says to run `conveyor up` instead of
        # waiting on ports where nothing listens.
        resolved_view_file(self.platform).unlink(missing_ok=True)
        return stopped

    def kill_broker(self, cluster: str, broker_id: int) -> int | None:
        """SIGKILL one broker, as a crash would."""
        return processes.kill(self.node_daemon(self.layout(cluster).broker(broker_id)))

    def start_brokers(self, cluster: str, *broker_ids: int, timeout: float = 180.0) -> None:
        """Start brokers again (after a kill), all at once, and wait until their cluster lists them.
        The wait is long because a broker killed mid-write recovers its logs first, and on a loaded
        host that alone has taken over a minute."""
        nodes = [self.layout(cluster).broker(broker_id) for broker_id in broker_ids]
        for node in nodes:
            daemon = self.node_daemon(node)
            if processes.running_pid(daemon) is None:
                processes.start(daemon, self.node_argv(node))
        deadline = time.monotonic() + timeout
        while missing := set(broker_ids) - self._brokers_registered(cluster):
            self._fail_if_dead(nodes)
            if time.monotonic() > deadline:
                late = [n for n in nodes if n.node_id in missing]
                raise StartTimeoutError(f"{', '.join(n.name for n in late)} did not register within {timeout:.0f} s; "
                                        + "; ".join(f"{n.name} last logged: {_last_startup_step(n)}" for n in late))
            time.sleep(0.5)

#: server.log lines that mark a broker's way to registering: recovering its logs, then its lifecycle.
_STARTUP_STEP = re.compile(r"LogLoader partition=|Loaded \d+ logs|\[(BrokerServer|BrokerLifecycleManager|KafkaRaftServer)")


def _last_startup_step(node: Node) -> str:
    """Where a broker that has not registered yet got to: a slow log recovery, or a lifecycle stuck."""
    try:
        lines = (node.log_dir / "server.log").read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return "(no server.log)"
    return next((line for line in reversed(lines) if _STARTUP_STEP.search(line)), "(no startup step yet)")


def _metrics_up(node: Node) -> bool:
    try:
        with urllib.request.urlopen(node.metrics_url, timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False
