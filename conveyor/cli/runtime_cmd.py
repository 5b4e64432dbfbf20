"""``conveyor up``, ``down``, ``status`` and ``smoke``: the local runtime."""

from __future__ import annotations

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from conveyor.cli.common import DEFAULT_PLATFORM, PlatformOption, console, platform_from
from conveyor.kafka import bootstrap_servers
from conveyor.runtime import processes
from conveyor.runtime.local import LocalPlatform, PlatformState
from conveyor.runtime.services import service_daemons
from conveyor.runtime.smoke import smoke as smoke_cluster


def register(app: typer.Typer) -> None:
    app.command()(up)
    app.command()(down)
    app.command()(status)
    app.command()(smoke)


def up(platform: PlatformOption = DEFAULT_PLATFORM) -> None:
    """Start every local cluster of the platform (real KRaft brokers) and Redis, then wait until
    each cluster reports all its brokers. Running it again starts only what is missing."""
    local = LocalPlatform(platform_from(platform))
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=True) as progress:
        tasks: dict[str, int] = {}

        def report(step: str, completed: int, total: int) -> None:
            if step not in tasks:
                tasks[step] = progress.add_task(step, total=total)
            progress.update(tasks[step], completed=completed, total=total)

        state = local.up(report)
    if state.started:
        console.print(f"started: {', '.join(state.started)}")
    else:
        console.print("everything was already running")
    _print_clusters(local, state)


def down(platform: PlatformOption = DEFAULT_PLATFORM) -> None:
    """Stop exactly the processes `conveyor up` started for this platform (found by pid file)."""
    stopped = LocalPlatform(platform_from(platform)).down()
    console.print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")


def status(platform: PlatformOption = DEFAULT_PLATFORM) -> None:
    """Show which local processes run, with their pids and ports. Exits 1 when any is down."""
    local = LocalPlatform(platform_from(platform))
    state = local.state()
    table = Table(title="local processes")
    for column in ("cluster", "node", "roles", "rack", "pid", "client", "controller", "metrics"):
        table.add_column(column)
    for cluster in state.clusters:
        for node_state in cluster.nodes:
            node = node_state.node
            pid = f"[green]{node_state.pid}[/]" if node_state.running else "[red]stopped[/]"
            table.add_row(cluster.layout.name, node.name, node.roles, node.rack or "", pid,
                          str(node.client_port) if node.is_broker else "",
                          str(node.controller_port) if node.is_controller else "", str(node.metrics_port))
    if state.redis is not None:
        pid = f"[green]{state.redis.pid}[/]" if state.redis.pid else "[red]stopped[/]"
        table.add_row("", "redis", "", "", pid, str(state.redis.layout.port), "", "")
    for daemon in service_daemons(local.platform):
        service_pid = processes.running_pid(daemon)
        table.add_row("", daemon.name, "service", "", f"[green]{service_pid}[/]" if service_pid else "stopped",
                      "", "", "")
    console.print(table)
    platform_model = local.platform
    for name, cluster in platform_model.clusters.items():
        if not cluster.is_local:
            console.print(f"{name}: existing cluster at {cluster.bootstrap} (not managed here)")
    raise typer.Exit(0 if state.all_running else 1)


def smoke(
    platform: PlatformOption = DEFAULT_PLATFORM,
    messages: int = typer.Option(100, min=1, help="Messages per cluster."),
) -> None:
    """Produce and consume through every cluster and check every message came back unchanged."""
    platform_model = platform_from(platform)
    table = Table(title="smoke: produce and consume through every cluster")
    for column in ("cluster", "bootstrap", "produced", "consumed", "produce", "consume"):
        table.add_column(column)
    for name in platform_model.clusters:
        result = smoke_cluster(platform_model, name, messages)
        table.add_row(name, bootstrap_servers(platform_model, name), str(result.produced),
                      f"[green]{result.consumed}[/]", f"{result.produce_seconds * 1000:.0f} ms",
                      f"{result.consume_seconds * 1000:.0f} ms")
    console.print(table)


def _print_clusters(local: LocalPlatform, state: PlatformState) -> None:
    table = Table(title=f"platform {local.platform.name}")
    for column in ("cluster", "role", "brokers", "bootstrap", "metrics"):
        table.add_column(column)
    for cluster in state.clusters:
        layout = cluster.layout
        metrics = "\n".join(n.metrics_url for n in layout.nodes)
        table.add_row(layout.name, layout.cluster.role.value, f"{cluster.brokers_running}/{len(layout.brokers)}",
                      layout.bootstrap, metrics)
    if state.redis is not None:
        table.add_row("redis", "serving", "", state.redis.layout.url, "")
    console.print(table)
    console.print(f"data and logs: {local.platform.home}    stop everything: conveyor down")
