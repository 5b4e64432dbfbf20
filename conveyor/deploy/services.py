"""What each long-running service of a platform runs as, on a host of its own: the command line, the
ports it binds and the probes that say whether it is up. One description, from platform.yaml, that
the systemd units (conveyor.deploy.systemd) and the Kubernetes manifests (conveyor.deploy.kubernetes)
are both written from, so the two never start a service differently.

A service's inputs are the platform file (its clusters named by ``bootstrap``, secrets as
``${VAR}`` or ``file:PATH``), its flags and its environment: nothing `conveyor up` writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from conveyor.config import Platform, duration_text

#: /metrics and /healthz of the services whose port platform.yaml does not set (the demo's).
METRICS_PORTS = {"replicator": 18181, "registrar": 18182, "views": 18191, "lake": 18192}


@dataclass(frozen=True)
class EnvRef:
    """An argument taken from the service's environment when it starts (systemd writes
    ``${NAME}``, Kubernetes ``$(NAME)``)."""

    name: str


#: The address a dispatcher node's clients reach it at: each deployment sets it per node.
ADVERTISE = EnvRef("CONVEYOR_ADVERTISE")


@dataclass(frozen=True)
class Probe:
    port: int
    #: Answers 200 while the process is alive; None: the port accepting connections says it (the
    #: gateway's /healthz fails while its clusters do, where a restart would not help).
    live: str | None = "/healthz"
    #: Answers 200 while it can serve (a gateway that reaches a cluster); None: ``live`` says both.
    ready: str | None = None
    https: bool = False


@dataclass(frozen=True)
class Service:
    #: The unit's or the workload's name: conveyor-gateway-dc1.
    name: str
    #: What it is: gateway, replicator, registrar, dispatcher, lake, views, watcher.
    part: str
    #: The arguments after the ``conveyor`` program.
    args: tuple[str | EnvRef, ...]
    #: Port name -> number: http, grpc, metrics.
    ports: dict[str, int] = field(default_factory=dict)
    probe: Probe | None = None
    #: Instances need fixed addresses (the dispatcher's clients are sent to one node by name).
    stateful: bool = False
    #: For a service that works in runs (the lake): how often, and the arguments of one run, for a
    #: scheduler that starts each run itself (a Kubernetes CronJob); ``args`` then keeps running.
    every: str | None = None
    once: tuple[str, ...] = ()


def services(platform: Platform, platform_path: str, host: str) -> list[Service]:
    """Every long-running service of ``platform``, reading the platform file at ``platform_path``
    and listening on ``host``. The dispatcher advertises what its environment says, which each
    deployment sets to the address its clients reach that node at (``ADVERTISE``)."""
    common = ("--platform", platform_path)
    found = []
    for dc in platform.writable_clusters():
        port = platform.gateway_port(dc)
        found.append(Service(f"conveyor-gateway-{dc}", "gateway",
                             ("gateway", "serve", "--dc", dc, *common, "--host", host, "--port", str(port)),
                             {"http": port}, Probe(port, live=None, ready="/readyz",
                                                   https=platform.gateway.tls is not None)))
    for part, command in (("replicator", ("replicate", "worker")), ("registrar", ("topics", "registrar"))):
        port = METRICS_PORTS[part]
        found.append(Service(f"conveyor-{part}", part, (*command, *common, "--metrics-host", host,
                                                        "--metrics-port", str(port)), {"metrics": port}, Probe(port)))
    dispatch = platform.dispatch
    found.append(Service("conveyor-dispatcher", "dispatcher",
                         ("dispatch", "serve", *common, "--host", host, "--port", str(dispatch.port),
                          "--metrics-port", str(dispatch.metrics_port), "--advertise", ADVERTISE),
                         {"grpc": dispatch.port, "metrics": dispatch.metrics_port}, Probe(dispatch.metrics_port),
                         stateful=True))
    lake = METRICS_PORTS["lake"]
    # One schedule: the watcher judges the lake's positions against the same pipeline.lake.every.
    lake_every = duration_text(platform.pipeline.lake.every)
    found.append(Service("conveyor-lake", "lake", ("lake", "run", *common, "--every", lake_every,
                                                   "--metrics-host", host, "--metrics-port", str(lake)),
                         {"metrics": lake}, Probe(lake), every=lake_every, once=("lake", "run", *common, "--once")))
    if platform.pipeline.realtime.views:
        views = METRICS_PORTS["views"]
        found.append(Service("conveyor-views", "views", ("views", "run", *common, "--metrics-host", host,
                                                         "--metrics-port", str(views)), {"metrics": views}, Probe(views)))
    ops = platform.ops
    found.append(Service("conveyor-watcher", "watcher", ("ops", "watch", *common, "--host", host, "--port", str(ops.port)),
                         {"http": ops.port}, Probe(ops.port, https=ops.tls is not None)))
    return found
