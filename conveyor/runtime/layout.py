"""Where each local process lives: node roles, ports and folders, derived from the platform.

Pure: the same platform always gives the same layout, so ``up``, ``down``, ``status`` and the
tests agree on ports and pid files without any state file.
"""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass
from pathlib import Path

from conveyor.config import Cluster, Platform

#: node.id of a cluster's dedicated KRaft controller; brokers are 1..N as in platform.yaml.
CONTROLLER_ID = 0
PORTS_PER_NODE = 3
LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class Node:
    cluster: str
    node_id: int
    is_broker: bool
    is_controller: bool
    client_port: int
    controller_port: int
    metrics_port: int
    rack: str | None
    dir: Path

    @property
    def name(self) -> str:
        kind = "broker" if self.is_broker else "controller"
        return f"{self.cluster}-{kind}-{self.node_id}"

    @property
    def roles(self) -> str:
        return ",".join(r for r, on in (("broker", self.is_broker), ("controller", self.is_controller)) if on)

    @property
    def metrics_url(self) -> str:
        return f"http://{LOOPBACK}:{self.metrics_port}/metrics"

    @property
    def properties_file(self) -> Path:
        return self.dir / "server.properties"

    @property
    def data_dir(self) -> Path:
        return self.dir / "data"

    @property
    def log_dir(self) -> Path:
        return self.dir / "logs"

    @property
    def pid_file(self) -> Path:
        return self.dir / "pid"

    @property
    def console_log(self) -> Path:
        return self.log_dir / "console.log"


@dataclass(frozen=True)
class ClusterLayout:
    name: str
    cluster: Cluster
    cluster_id: str
    nodes: tuple[Node, ...]

    @property
    def brokers(self) -> list[Node]:
        return [n for n in self.nodes if n.is_broker]

    @property
    def controllers(self) -> list[Node]:
        return [n for n in self.nodes if n.is_controller]

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{LOOPBACK}:{n.client_port}" for n in self.brokers)

    @property
    def quorum_voters(self) -> str:
        return ",".join(f"{n.node_id}@{LOOPBACK}:{n.controller_port}" for n in self.controllers)

    def broker(self, broker_id: int) -> Node:
        for node in self.brokers:
            if node.node_id == broker_id:
                return node
        raise KeyError(f"cluster {self.name} has no broker {broker_id}")


@dataclass(frozen=True)
class RedisLayout:
    port: int
    dir: Path

    @property
    def url(self) -> str:
        """Where it listens (TLS; each user's URL adds its credentials: conveyor.runtime.redis_access)."""
        return f"rediss://{LOOPBACK}:{self.port}/0"

    @property
    def acl_file(self) -> Path:
        return self.dir / "users.acl"

    @property
    def pid_file(self) -> Path:
        return self.dir / "pid"

    @property
    def console_log(self) -> Path:
        return self.dir / "redis.log"


def kraft_cluster_id(platform_name: str, cluster_name: str) -> str:
    """A stable KRaft cluster id (22 characters of URL-safe base64 of a UUID)."""
    raw = uuid.uuid5(uuid.NAMESPACE_URL, f"conveyor:{platform_name}:{cluster_name}").bytes
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def local_clusters(platform: Platform) -> dict[str, Cluster]:
    """The clusters this machine runs: those platform.yaml gives no bootstrap."""
    return {name: cluster for name, cluster in platform.clusters.items() if cluster.bootstrap is None}


def plan_layout(platform: Platform) -> list[ClusterLayout]:
    """Every local cluster with its nodes, ports handed out in the order the file declares the
    clusters. A one-broker cluster runs one combined node; a larger one gets a dedicated controller
    so that stopping brokers never takes the quorum with it."""
    layouts: list[ClusterLayout] = []
    port = platform.runtime.base_port
    for name, cluster in local_clusters(platform).items():
        cluster_dir = platform.home / name
        combined = cluster.brokers == 1
        specs: list[tuple[int, bool, bool]] = []
        if not combined:
            specs.append((CONTROLLER_ID, False, True))
        specs += [(broker_id, True, combined) for broker_id in cluster.broker_ids()]
        nodes = []
        for node_id, is_broker, is_controller in specs:
            kind = "broker" if is_broker else "controller"
            nodes.append(
                Node(
                    cluster=name,
                    node_id=node_id,
                    is_broker=is_broker,
                    is_controller=is_controller,
                    client_port=port,
                    controller_port=port + 1,
                    metrics_port=port + 2,
                    rack=cluster.rack_of(node_id) if is_broker else None,
                    dir=cluster_dir / f"{kind}-{node_id}",
                )
            )
            port += PORTS_PER_NODE
        layouts.append(ClusterLayout(name, cluster, kraft_cluster_id(platform.name, name), tuple(nodes)))
    return layouts


def redis_layout(platform: Platform) -> RedisLayout | None:
    settings = platform.runtime.redis
    if not settings.enabled or settings.url:
        return None
    return RedisLayout(port=settings.port or platform.runtime.base_port - 1, dir=platform.home / "redis")
