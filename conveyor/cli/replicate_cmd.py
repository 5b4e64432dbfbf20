"""``conveyor replicate``: copy writable clusters into the central cluster, every route in one service."""

from __future__ import annotations

import datetime as dt
import signal
import subprocess
import sys
from typing import Annotated

import typer
from rich.markup import escape

from conveyor.cli.common import (DEFAULT_METRICS_HOST, DEFAULT_PLATFORM, Column, MetricsHostOption, MetricsPortOption,
                                 OutputFormat, OutputOption, PlatformOption, Section, console, endpoint, platform_from,
                                 render)
from conveyor.config import ConfigError, Platform, Problem

app = typer.Typer(rich_markup_mode="markdown", help="The federation replicator: routes of platform.yaml, exactly once.", no_args_is_help=True)

RoutesOption = Annotated[list[str] | None, typer.Option(
    "--route", "-r", help="A route of platform.yaml (repeatable); none: every route, and those added to the file "
                          "while it runs.")]


def _routes(platform: Platform, routes: list[str] | None) -> list[str] | None:
    for route in routes or []:
        if route not in platform.routes:
            known = ", ".join(platform.routes) or "none"
            raise ConfigError([Problem(f"routes.{route}", f"no such route (known: {known})")])
    if routes is None and not platform.routes:
        raise ConfigError([Problem("routes", "platform.yaml has no route to serve")])
    return routes or None


def _route_args(routes: list[str] | None) -> list[str]:
    return [arg for route in routes or [] for arg in ("--route", route)]


@app.command()
def worker(routes: RoutesOption = None, platform: PlatformOption = DEFAULT_PLATFORM,
           worker_id: Annotated[str | None, typer.Option("--id", help="Worker id (default: host-pid; with one "
                                                                      "route, as given).")] = None,
           metrics_port: MetricsPortOption = None, metrics_host: MetricsHostOption = DEFAULT_METRICS_HOST) -> None:
    """Run a worker of each route in the foreground, one process for all of them: each route's
    workers share its buckets through Kafka's group protocol, so a worker's loss moves only its
    buckets and a route added to platform.yaml starts without moving anything running. SIGTERM
    finishes the current transactions and leaves the groups so the other workers take the buckets
    at once."""
    from conveyor.replicate.service import RoutesService
    from conveyor.service import serve

    model = platform_from(platform)
    chosen = _routes(model, routes)
    raise typer.Exit(serve(RoutesService(model, chosen, worker_id, platform.resolve()),
                           endpoint(metrics_host, metrics_port)))


@app.command()
def run(routes: RoutesOption = None, platform: PlatformOption = DEFAULT_PLATFORM,
        workers: Annotated[int, typer.Option(min=1, help="Worker processes to run.")] = 1,
        metrics_port: MetricsPortOption = None) -> None:
    """Run N worker processes of the routes (each a member of every route's group; worker i serves
    metrics on metrics-port + i). Stops them all on SIGTERM or Ctrl-C."""
    model = platform_from(platform)
    chosen = _routes(model, routes)
    children = []
    for i in range(workers):
        argv = [sys.executable, "-m", "conveyor", "replicate", "worker", *_route_args(chosen),
                "--platform", str(platform.resolve()), "--id", f"{'+'.join(chosen or ['all'])}-w{i}"]
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
def start(routes: RoutesOption = None, platform: PlatformOption = DEFAULT_PLATFORM,
          metrics_port: MetricsPortOption = None) -> None:
    """Start a worker of the routes (every route without --route) as a background service of the
    local platform."""
    from conveyor.runtime.services import start_service

    model = platform_from(platform)
    chosen = _routes(model, routes)
    args = ["replicate", "worker", *_route_args(chosen), "--platform", str(platform.resolve())]
    if metrics_port is not None:
        args += ["--metrics-port", str(metrics_port)]
    name = "replicate" if chosen is None else f"replicate-{'+'.join(chosen)}"
    pid, started = start_service(model, name, args)
    console.print(f"{name} {'started' if started else 'already running'} (pid {pid})")


_TOPIC_COLUMNS = (Column("topic"), Column("mode"), Column("partitions"), Column("source records", "source_records"),
                  Column("copied"),
                  Column("waiting", cell=lambda t: f"[{'green' if t.waiting == 0 else 'yellow'}]{t.waiting}[/]"),
                  Column("lost", cell=lambda t: f"[{'red' if t.lost else 'green'}]{t.lost}[/]"))


@app.command()
def status(platform: PlatformOption = DEFAULT_PLATFORM,
           route: Annotated[str | None, typer.Option("--route", "-r", help="Only this route.")] = None,
           output: OutputOption = OutputFormat.table) -> None:
    """Per route: the workers in its group; per source topic, records waiting to be copied and
    offsets lost to the source's retention; every recorded gap; and the source configs that copies
    of undeclared topics do not have."""
    from conveyor.replicate.status import route_status

    model = platform_from(platform)
    if route is not None:
        _routes(model, [route])
    routes = [route_status(model, name) for name in model.routes if route in (None, name)]
    if output is OutputFormat.json:
        render(output, routes=routes)
        return
    for found in routes:
        render(output, Section("topics", f"route {found.route}: {found.source} -> {found.destination}, undeclared "
                               f"topics {found.mode}, {found.buckets} buckets, workers: {', '.join(found.workers) or 'none'}",
                               _TOPIC_COLUMNS, found.topics))
        for gap in found.gaps:
            at = dt.datetime.fromtimestamp(gap.found_ms / 1000, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
            console.print(f"[bold red]DATA LOST:[/] route {found.route}: {gap.topic}[{gap.partition}] offsets "
                          f"{gap.first}..{gap.last} ({gap.count:,} records) were deleted by the source's retention "
                          f"before they were copied (found {at})", soft_wrap=True)
        for difference in found.differences:
            console.print(f"[yellow]config not copied:[/] route {found.route}: {escape(str(difference))}",
                          soft_wrap=True)
