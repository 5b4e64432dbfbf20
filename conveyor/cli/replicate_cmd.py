"""``conveyor replicate``: copy writable clusters into the central cluster, route by route."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
from typing import Annotated

import typer
from confluent_kafka import TopicPartition
from rich.table import Table

from conveyor import kafka
from conveyor.cli.common import DEFAULT_PLATFORM, PlatformOption, console, platform_from
from conveyor.config import ConfigError, Platform, Problem

app = typer.Typer(rich_markup_mode="markdown", help="The federation replicator: routes of platform.yaml, exactly once.", no_args_is_help=True)

RouteOption = Annotated[str, typer.Option("--route", "-r", envvar="CONVEYOR_ROUTE", help="A route of platform.yaml.")]
MetricsPortOption = Annotated[int | None, typer.Option(envvar="CONVEYOR_METRICS_PORT",
                                                       help="Serve /metrics and /healthz on 127.0.0.1 here.")]


def _route(platform: Platform, route: str) -> None:
    if route not in platform.routes:
        known = ", ".join(platform.routes) or "none"
        raise ConfigError([Problem(f"routes.{route}", f"no such route (known: {known})")])


@app.command()
def worker(route: RouteOption, platform: PlatformOption = DEFAULT_PLATFORM,
           worker_id: Annotated[str | None, typer.Option("--id", help="Worker id (default: route-host-pid).")] = None,
           metrics_port: MetricsPortOption = None) -> None:
    """Run one worker of a route in the foreground; SIGTERM finishes the current transactions and
    leaves the group so the other workers take its buckets at once."""
    from conveyor.replicate.worker import run_worker

    model = platform_from(platform)
    _route(model, route)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    raise typer.Exit(run_worker(model, route, worker_id, metrics_port))


@app.command()
def run(route: RouteOption, platform: PlatformOption = DEFAULT_PLATFORM,
        workers: Annotated[int, typer.Option(min=1, help="Worker processes to run.")] = 1,
        metrics_port: MetricsPortOption = None) -> None:
    """Run a route with N worker processes (each a group member; worker i serves metrics on
    metrics-port + i). Stops them all on SIGTERM or Ctrl-C."""
    model = platform_from(platform)
    _route(model, route)
    children = []
    for i in range(workers):
        argv = [sys.executable, "-m", "conveyor", "replicate", "worker", "--route", route,
                "--platform", str(platform.resolve()), "--id", f"{route}-w{i}"]
        if metrics_port is not None:
            argv += ["--metrics-port", str(metrics_port + i)]
        children.append(subprocess.Popen(argv))

    def forward(signum: int, _frame: object) -> None:
        for child in children:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    statuses = [child.wait() for child in children]
    raise typer.Exit(max(statuses))


@app.command()
def start(route: RouteOption, platform: PlatformOption = DEFAULT_PLATFORM,
          metrics_port: MetricsPortOption = None) -> None:
    """Start one worker of a route as a background service of the local platform."""
    from conveyor.runtime.services import start_service

    model = platform_from(platform)
    _route(model, route)
    args = ["replicate", "worker", "--route", route, "--platform", str(platform.resolve())]
    if metrics_port is not None:
        args += ["--metrics-port", str(metrics_port)]
    pid, started = start_service(model, f"replicate-{route}", args)
    console.print(f"replicate-{route} {'started' if started else 'already running'} (pid {pid})")


@app.command()
def status(platform: PlatformOption = DEFAULT_PLATFORM,
           route: Annotated[str | None, typer.Option("--route", "-r", help="Only this route.")] = None) -> None:
    """Per route: the workers in its group and, per source topic, records waiting to be copied."""
    from conveyor.replicate import plan
    from conveyor.replicate.copier import RouteState, read_bucket_offsets
    from conveyor.replicate.metrics import ReplicateMetrics

    model = platform_from(platform)
    for name, spec in model.routes.items():
        if route and name != route:
            continue
        admin = kafka.admin(model, spec.destination)
        group = admin.describe_consumer_groups([plan.group_id(name)])[plan.group_id(name)].result()
        members = sorted(m.client_id for m in group.members)
        state = RouteState(model, name, spec, "status", ReplicateMetrics())
        stored = {}
        if plan.route_topic(name) in admin.list_topics(timeout=10).topics:
            for bucket in range(spec.buckets):
                stored.update(read_bucket_offsets(state, bucket))
        source = kafka.consumer(model, spec.source, "conveyor-replicate-status", "status")
        metadata = source.list_topics(timeout=10)
        table = Table(title=f"route {name}: {spec.source} -> {spec.destination}, {spec.mode.value}, "
                            f"{spec.buckets} buckets, workers: {', '.join(members) or 'none'}")
        for column in ("topic", "partitions", "source records", "copied", "waiting"):
            table.add_column(column)
        for topic in sorted(t for t in metadata.topics if spec.selects(t)):
            ends = total = copied = 0
            for partition in metadata.topics[topic].partitions:
                low, high = source.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
                ends += high
                total += high - low
                copied += stored.get(plan.SourcePartition(topic, partition), low)
            waiting = ends - copied
            table.add_row(topic, str(len(metadata.topics[topic].partitions)), str(total), str(copied),
                          f"[{'green' if waiting == 0 else 'yellow'}]{waiting}[/]")
        source.close()
        console.print(table)
