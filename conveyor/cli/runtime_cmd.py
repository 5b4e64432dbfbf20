"""``conveyor up``, ``down``, ``status`` and ``smoke``: the local runtime. Up, down and status read
platform.yaml as written (the runtime starts the clusters it gives no bootstrap); smoke is a client
of what runs."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from conveyor.cli.common import (DEFAULT_PLATFORM, Column, OutputFormat, OutputOption, PlatformOption, Section, console,
                                 err_console, platform_from, render, say)
from conveyor.config import load_platform
from conveyor.runtime import processes
from conveyor.runtime.local import LocalPlatform, PlatformState
from conveyor.runtime.services import service_daemons
from conveyor.runtime.smoke import smoke as smoke_cluster


def register(app: typer.Typer) -> None:
    app.command()(up)
    app.command()(down)
    app.command()(status)
    app.command()(smoke)


def up(platform: PlatformOption = DEFAULT_PLATFORM, output: OutputOption = OutputFormat.table) -> None:
    """Start every cluster platform.yaml gives no bootstrap (real KRaft brokers) and Redis, write
    where they are and how to log in (the resolved view every other command reads), then wait until
    each cluster reports all its brokers. Running it again starts only what is missing."""
    local = LocalPlatform(load_platform(platform))
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console if output is OutputFormat.table else err_console,
                  transient=True) as progress:
        tasks: dict[str, int] = {}

        def report(step: str, completed: int, total: int) -> None:
            if step not in tasks:
                tasks[step] = progress.add_task(step, total=total)
            progress.update(tasks[step], completed=completed, total=total)

        state = local.up(report)
    say(output, f"started: {', '.join(state.started)}" if state.started else "everything was already running")
    _print_clusters(local, state, output)


def down(platform: PlatformOption = DEFAULT_PLATFORM) -> None:
    """Stop exactly the processes `conveyor up` started for this platform (found by pid file)."""
    stopped = LocalPlatform(load_platform(platform)).down()
    console.print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")


def _processes(local: LocalPlatform, state: PlatformState) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for cluster in state.clusters:
        for node_state in cluster.nodes:
            node = node_state.node
            rows.append({"cluster": cluster.layout.name, "node": node.name, "roles": node.roles, "rack": node.rack,
                         "running": node_state.running, "pid": node_state.pid if node_state.running else None,
                         "client_port": node.client_port if node.is_broker else None,
                         "controller_port": node.controller_port if node.is_controller else None,
                         "metrics_port": node.metrics_port})
    if state.redis is not None:
        rows.append(_process("redis", None, state.redis.pid, client_port=state.redis.layout.port))
    if state.postgres is not None:
        rows.append(_process("postgres", None, state.postgres.pid, client_port=state.postgres.layout.port))
    for monitor, pid in state.monitors:
        rows.append(_process(monitor.name, None, pid, client_port=monitor.port))
    for daemon in service_daemons(local.platform):
        rows.append(_process(daemon.name, "service", processes.running_pid(daemon)))
    return rows


def _process(name: str, roles: str | None, pid: int | None, client_port: int | None = None) -> dict[str, Any]:
    return {"cluster": None, "node": name, "roles": roles, "rack": None, "running": bool(pid), "pid": pid or None,
            "client_port": client_port, "controller_port": None, "metrics_port": None}


def _pid(row: dict[str, Any]) -> str:
    return f"[green]{row['pid']}[/]" if row["running"] else "[red]stopped[/]"


def status(platform: PlatformOption = DEFAULT_PLATFORM, output: OutputOption = OutputFormat.table) -> None:
    """Show which local processes run, with their pids and ports. Exits 1 when any is down."""
    local = LocalPlatform(load_platform(platform))
    state = local.state()
    columns = (Column("cluster"), Column("node"), Column("roles"), Column("rack"), Column("pid", cell=_pid),
               Column("client", "client_port"), Column("controller", "controller_port"),
               Column("metrics", "metrics_port"))
    existing = [{"cluster": name, "bootstrap": cluster.bootstrap}
                for name, cluster in local.platform.clusters.items() if cluster.bootstrap is not None]
    render(output, Section("processes", "local processes", columns, _processes(local, state)),
           existing_clusters=existing, all_running=state.all_running)
    if output is OutputFormat.table:
        for row in existing:
            console.print(f"{row['cluster']}: existing cluster at {row['bootstrap']} (not managed here)")
    raise typer.Exit(0 if state.all_running else 1)


def smoke(
    platform: PlatformOption = DEFAULT_PLATFORM,
    messages: int = typer.Option(100, min=1, help="Messages per cluster."),
    output: OutputOption = OutputFormat.table,
) -> None:
    """Produce and consume through every cluster and check every message came back unchanged."""
    platform_model = platform_from(platform)
    rows = []
    for name in platform_model.clusters:
        result = smoke_cluster(platform_model, name, messages)
        rows.append({"cluster": name, "bootstrap": platform_model.bootstrap(name), **asdict(result)})
    columns = (Column("cluster"), Column("bootstrap"), Column("produced"),
               Column("consumed", cell=lambda r: f"[green]{r['consumed']}[/]"),
               Column("produce", cell=lambda r: f"{r['produce_seconds'] * 1000:.0f} ms"),
               Column("consume", cell=lambda r: f"{r['consume_seconds'] * 1000:.0f} ms"))
    render(output, Section("clusters", "smoke: produce and consume through every cluster", columns, rows))


def _print_clusters(local: LocalPlatform, state: PlatformState, output: OutputFormat) -> None:
    rows = [{"cluster": c.layout.name, "role": c.layout.cluster.role.value, "brokers_running": c.brokers_running,
             "brokers": len(c.layout.brokers), "bootstrap": c.layout.bootstrap,
             "metrics": [n.metrics_url for n in c.layout.nodes]} for c in state.clusters]
    if state.redis is not None:
        rows.append({"cluster": "redis", "role": "serving", "brokers_running": None, "brokers": None,
                     "bootstrap": state.redis.layout.url, "metrics": []})
    if state.postgres is not None:
        rows.append({"cluster": "postgres", "role": "lake catalog", "brokers_running": None, "brokers": None,
                     "bootstrap": state.postgres.layout.url, "metrics": []})
    columns = (Column("cluster"), Column("role"),
               Column("brokers", cell=lambda r: "" if r["brokers"] is None else f"{r['brokers_running']}/{r['brokers']}"),
               Column("bootstrap"), Column("metrics", cell=lambda r: "\n".join(r["metrics"])))
    render(output, Section("clusters", f"platform {local.platform.name}", columns, rows), home=local.platform.home,
           started=list(state.started))
    say(output, f"data and logs: {local.platform.home}    stop everything: conveyor down")
