"""The watch service as a long-running service: the watcher's rounds and its dashboard, JSON API,
/metrics and /healthz behind the edges' guard, configured from the platform without I/O, then run
until stopped (conveyor.service). `conveyor ops watch` runs it under conveyor.service.serve."""

from __future__ import annotations

from conveyor.config import Platform
from conveyor.edge_guard import EdgeGuard, GuardedServer, ServedEdge, guarded_config
from conveyor.ops.metrics import ops_registry
from conveyor.ops.watch import Watcher
from conveyor.tls import server_tls, uvicorn_tls
from conveyor.web.app import create_app


def watch_service(platform: Platform, host: str = "127.0.0.1", port: int | None = None) -> ServedEdge:
    """The watch service on ``host``:``port`` (default: ``ops.port``). It opens nothing until it
    runs: the rounds start with the app, and the clusters' samplers with the first round."""
    watcher = Watcher(platform)
    guard = EdgeGuard("dashboard", platform.ops.connections)
    registry = ops_registry(watcher)
    registry.register(guard)
    config = guarded_config(create_app(watcher, host, registry), host, port or platform.ops.port,
                            **uvicorn_tls(server_tls(platform, platform.ops.tls)))
    return ServedEdge(GuardedServer(config, guard), registry, watcher.health)
