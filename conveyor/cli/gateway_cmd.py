"""``conveyor gateway serve``: the HTTP produce API of one data centre."""

from __future__ import annotations

import logging
from typing import Annotated

import typer
import uvicorn

from conveyor.cli.common import DEFAULT_PLATFORM, PlatformOption, platform_from
from conveyor.config import ClusterRole, ConfigError, Problem

app = typer.Typer(help="The data bus gateway: services publish events over HTTP.", no_args_is_help=True)


@app.command()
def serve(
    dc: Annotated[str, typer.Option("--dc", envvar="CONVEYOR_DC", help="The writable cluster of this data centre.")],
    platform: PlatformOption = DEFAULT_PLATFORM,
    port: Annotated[int | None, typer.Option(envvar="CONVEYOR_GATEWAY_PORT",
                                             help="Port on 127.0.0.1 (default: gateway.port).")] = None,
    host: Annotated[str, typer.Option(envvar="CONVEYOR_GATEWAY_HOST", help="Address to listen on.")] = "127.0.0.1",
) -> None:
    """Serve POST /v1/topics/{topic}/events, /healthz and /metrics. Answers only after Kafka
    acknowledged every event; fails over to the cluster's `failover` list. SIGTERM drains and
    publishes the last audit counts before exiting."""
    from conveyor.gateway.app import Gateway, create_app

    model = platform_from(platform)
    cluster = model.cluster(dc)
    if cluster.role != ClusterRole.writable:
        raise ConfigError([Problem(f"clusters.{dc}.role", "the gateway writes only to a writable cluster")])
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    gateway = Gateway(model, dc)
    uvicorn.run(create_app(gateway), host=host, port=port or model.gateway.port, log_level="warning",
                access_log=False, timeout_graceful_shutdown=30)
