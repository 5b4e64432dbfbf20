"""The gateway as a long-running service: configured from the platform without I/O, then run until
stopped (conveyor.service). `conveyor gateway serve` runs it under conveyor.service.serve, the same
under the local runtime's supervisor as under a user's service manager."""

from __future__ import annotations

from conveyor.config import ClusterRole, ConfigError, Platform, Problem
from conveyor.edge_guard import ServedEdge
from conveyor.gateway.app import Gateway, create_app
from conveyor.gateway.server import gateway_server
from conveyor.tls import server_tls, uvicorn_tls

#: Seconds a stopping gateway gives the requests under way to be answered.
GRACEFUL_STOP = 30


def check_writable(platform: Platform, dc: str) -> None:
    """A gateway writes to its data centre's writable cluster only."""
    if platform.cluster(dc).role != ClusterRole.writable:
        raise ConfigError([Problem(f"clusters.{dc}.role", "the gateway writes only to a writable cluster")])


def gateway_service(platform: Platform, dc: str, host: str = "127.0.0.1", port: int | None = None) -> ServedEdge:
    """The gateway of data centre ``dc`` on ``host``:``port`` (default: its place among the
    writable clusters after ``gateway.port``). It opens nothing until it runs."""
    check_writable(platform, dc)
    gateway = Gateway(platform, dc)
    registry = gateway.metrics.registry
    server = gateway_server(create_app(gateway), platform.gateway, registry, host, port or platform.gateway_port(dc),
                            timeout_graceful_shutdown=GRACEFUL_STOP,
                            **uvicorn_tls(server_tls(platform, platform.gateway.tls)))
    return ServedEdge(server, registry, lambda: (gateway.serving, {"local": dc, "writing_to": gateway.writer.active}))
