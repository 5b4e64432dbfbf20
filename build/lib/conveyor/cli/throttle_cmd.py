"""``conveyor ops throttle``: slow down consumers far behind the tail while a broker is busy.

Registered under the ``ops`` group: ``ops_cmd.app.command()(throttle_cmd.throttle)``.
"""

from __future__ import annotations

from typing import Annotated

import typer

from conveyor.cli.common import (DEFAULT_METRICS_HOST, DEFAULT_PLATFORM, MetricsHostOption, PlatformOption, YesOption,
                                 confirm, console, endpoint, platform_from)
from conveyor.config import parse_size_bytes
from conveyor.ops.throttle.policy import Action, Decision, Round, ThrottlePolicy
from conveyor.ops.throttle.service import ThrottleConfig, ThrottleService
from conveyor.service import serve

_DEFAULTS = ThrottlePolicy()


def _show_decision(decision: Decision) -> None:
    colour = "yellow" if decision.action is Action.SET else "green"
    rate = f" consumer_byte_rate={decision.rate:,}" if decision.rate is not None else ""
    console.print(f"[{colour}]{decision.action.value}[/] quota on client [bold]{decision.client_id}[/]{rate}: "
                  f"{decision.reason}", highlight=False)


def _show_round(result: Round) -> None:
    busy = ", ".join(f"broker {b} ({why})" for b, why in sorted(result.busy.items())) or "none"
    console.print(f"busy: {busy}; {len(result.decisions)} change(s), {len(result.spared)} client(s) left alone",
                  highlight=False)


def throttle(
    platform: PlatformOption = DEFAULT_PLATFORM,
    cluster: Annotated[str | None, typer.Option(
        "--cluster", "-c", envvar="CONVEYOR_CLUSTER",
        help="Cluster to watch (default: pipeline.source, else the only read cluster).")] = None,
    interval: Annotated[float, typer.Option("--interval", min=1, help="Seconds between rounds.")] = 15.0,
    once: Annotated[bool, typer.Option("--once", help="Run one round and exit (for cron and tests).")] = False,
    p99_ms: Annotated[float, typer.Option(
        "--p99-ms", envvar="CONVEYOR_THROTTLE_P99_MS", min=0,
        help="Produce request p99 (ms) at or above which a broker is busy.")] = _DEFAULTS.p99_busy_ms,
    disk_util: Annotated[float, typer.Option(
        "--disk-util", envvar="CONVEYOR_THROTTLE_DISK_UTIL", min=0,
        help="Disk utilisation (0..1) at or above which a broker is busy; above 1 turns the disk signal off.")] = _DEFAULTS.disk_busy,
    lag_far: Annotated[int, typer.Option(
        "--lag-far", min=1, help="Records behind the end that count as reading from disk.")] = _DEFAULTS.lag_far,
    lag_tail: Annotated[int, typer.Option(
        "--lag-tail", min=0, help="Records behind at or under which a consumer is at the tail (never throttled).")]
    = _DEFAULTS.lag_tail,
    quota: Annotated[str, typer.Option(
        "--quota", help="consumer_byte_rate per broker for a throttled client id (e.g. 1MiB).")] = "1MiB",
    metrics_port: Annotated[int | None, typer.Option(
        "--metrics-port", envvar="CONVEYOR_THROTTLE_METRICS_PORT",
        help="Serve /metrics (decisions, quotas, busy brokers) for the dashboard on this port.")] = None,
    metrics_host: MetricsHostOption = DEFAULT_METRICS_HOST,
    yes: YesOption = False,
) -> None:
    """Set consumer_byte_rate quotas on the client ids of consumer groups far behind the tail while
    a broker is busy (produce request p99 or disk utilisation); never on consumers at the tail; lift them
    when the broker is healthy again. Every decision is printed, logged and kept in
    `<runtime.home>/throttle/<cluster>.decisions.jsonl`."""
    try:
        policy = ThrottlePolicy(p99_busy_ms=p99_ms, disk_busy=disk_util, lag_far=lag_far, lag_tail=lag_tail,
                                quota_bytes=parse_size_bytes(quota))
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    model = platform_from(platform)
    cluster = model.read_cluster(cluster)
    confirm(cluster, f"let the throttle set client quotas on cluster {cluster}", yes)
    service = ThrottleService(ThrottleConfig(model, cluster, policy, interval), _show_decision, _show_round)
    if once:
        service.once()
        return
    console.print(f"throttling lagging consumers of {cluster} every {interval:g} s (Ctrl-C to stop)")
    raise typer.Exit(serve(service, endpoint(metrics_host, metrics_port)))
