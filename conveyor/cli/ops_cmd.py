"""``conveyor ops lag``, ``conveyor ops health``, ``conveyor ops dashboard`` and ``conveyor ops watch``.

`lag` and `health` show the watcher's state: from a running watch service (``--url``), or sampled
here for a few rounds. Both print the same JSON shape the dashboard draws (``conveyor.ops.report``).
"""

from __future__ import annotations

import ssl
import time
from typing import Annotated, Any

import httpx
import typer

from conveyor.cli.common import (DEFAULT_PLATFORM, Column, OutputFormat, OutputOption, PlatformOption, Section, console,
                                 err_console, platform_from, render)
from conveyor.config import Platform
from conveyor.errors import ConveyorError
from conveyor.ops.errors import WatchRefusedError, WatchUnreachableError
from conveyor.service import serve as serve_service
from conveyor.service import wait_healthy
from conveyor.tls import base_url, trusted

app = typer.Typer(help="Operations: the watch service behind lag, health, alerts and the dashboard.",
                  no_args_is_help=True)

STATUS_STYLE = {"OK": "green", "WARN": "yellow", "STALL": "dark_orange", "STOP": "red", "REWIND": "magenta",
                "ERR": "bold red", "WARNING": "yellow", "DEGRADED": "yellow", "CRITICAL": "bold red"}
CRITICAL_STATUSES = ("STOP", "REWIND", "ERR")

UrlOption = Annotated[str | None, typer.Option(
    "--url", envvar="CONVEYOR_OPS_URL", help="A running watch service (http://127.0.0.1:18070); "
    "without it, sample here for --samples rounds.")]
TokenOption = Annotated[str | None, typer.Option(
    "--token", envvar="CONVEYOR_OPS_TOKEN", show_envvar=True,
    help="The watch service's ops.token, when it has one (prefer the variable: an argument shows in ps).")]
SamplesOption = Annotated[int, typer.Option(min=1, help="Rounds to sample when no --url is given.")]
IntervalOption = Annotated[float, typer.Option(min=0.1, help="Seconds between those rounds.")]
ClusterOption = Annotated[str | None, typer.Option("--cluster", "-c", help="Only this cluster.")]
PortOption = Annotated[int | None, typer.Option(envvar="CONVEYOR_OPS_PORT", help="Port on 127.0.0.1 "
                                                "(default: ops.port).")]


def register(root: typer.Typer) -> None:
    """``ops lag``, ``ops health`` and ``ops dashboard``; the top-level names they had stay for a
    release as hidden aliases."""
    for command in (lag, health, dashboard):
        app.command()(command)
        name = command.__name__
        root.command(name, hidden=True, help=f"Deprecated: use `conveyor ops {name}`.")(command)


def _styled(value: str) -> str:
    return f"[{STATUS_STYLE.get(value, 'white')}]{value}[/]"


def _num(value: float | None, unit: str = "") -> str:
    if value is None:
        return "–"
    fraction = isinstance(value, float) and not value.is_integer()
    return (f"{value:,.1f}" if fraction else f"{value:,.0f}") + unit


def fetch_state(url: str, group: str | None, cluster: str | None,
                verify: ssl.SSLContext | bool = True, token: str | None = None) -> dict[str, Any]:
    params = {k: v for k, v in (("group", group), ("cluster", cluster)) if v}
    if group:
        params["partitions"] = "all"
    try:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        response = httpx.get(f"{url.rstrip('/')}/api/state", params=params, timeout=10, verify=verify, headers=headers)
        if response.status_code == 401:
            raise WatchRefusedError(url)
        response.raise_for_status()
    except httpx.HTTPError as exc:
        raise WatchUnreachableError(url, str(exc) or type(exc).__name__) from None
    data: dict[str, Any] = response.json()
    return data


def sample_state(platform: Platform, samples: int, interval: float, group: str | None,
                 cluster: str | None) -> dict[str, Any]:
    from conveyor.ops.report import state_json
    from conveyor.ops.watch import Watcher

    watcher = Watcher(platform, [cluster] if cluster else None)
    try:
        # On stderr: stdout holds the tables, or the -o json document alone.
        with err_console.status(f"sampling {samples} round(s), {interval:g} s apart"):
            for i in range(samples):
                started = time.monotonic()
                state = watcher.cycle()
                if i < samples - 1:
                    time.sleep(max(0.0, interval - (time.monotonic() - started)))
    finally:
        watcher.close()
    return state_json(state, group, cluster, all_partitions=group is not None)


def _state(platform: PlatformOption, url: str | None, samples: int, interval: float, group: str | None,
           cluster: str | None, token: str | None) -> dict[str, Any]:
    if url:
        # A dashboard served with the local CA's certificate is verified against that CA.
        verify = trusted(platform_from(platform)) if url.startswith("https:") else True
        return fetch_state(url, group, cluster, verify, token)
    return sample_state(platform_from(platform), samples, interval, group, cluster)


_ALERT_COLUMNS = (Column("severity", cell=lambda a: _styled(a["severity"])), Column("rule"), Column("subject"),
                  Column("what is wrong", "message", overflow="fold"), Column("look at", "look_at", overflow="fold"))


def _about_groups(alert: dict[str, Any]) -> bool:
    """An alert about a consumer group (lag, offsets moved or lost, read amplification)."""
    return "group" in alert["labels"]


def _alerts(output: OutputFormat, alerts: list[dict[str, Any]], title: str, error: str | None) -> Section | None:
    """The alerts as a section, or (no alerts, as a table) a line that says there are none, or why
    they could not be read."""
    if alerts or output is OutputFormat.json:
        return Section("alerts", title, _ALERT_COLUMNS, alerts, show_lines=True)
    if error is not None:
        console.print(f"[yellow]{title}: not read: {error}[/]")
    else:
        console.print(f"[green]{title}: none[/]")
    return None


def _right(header: str, key: str, unit: str = "") -> Column:
    return Column(header, cell=lambda row: _num(row[key], unit), justify="right")


_GROUP_COLUMNS = (Column("cluster"),
                 # A reader's monitoring-only group (conveyor.positions) says where its real position lives.
                 Column("group", cell=lambda g: g["group"] + (f" (position in {g['kept_in']})" if g.get("kept_in") else "")),
                 Column("state"), Column("status", cell=lambda g: _styled(g["status"])),
                  _right("lag", "total_lag"), _right("behind", "max_seconds_behind", " s"),
                  Column("partitions", cell=lambda g: f"{g['partitions_not_ok']} not OK of {g['partitions_tracked']}"),
                  Column("worst", cell=lambda g: g["partitions"][0]["message"]
                         if g["partitions"] and g["status"] != "OK" else "", overflow="fold"))
_PARTITION_COLUMNS = (Column("topic"), Column("partition", justify="right"),
                      Column("status", cell=lambda p: _styled(p["status"])), _right("committed", "committed"),
                      _right("end", "end"), _right("lag", "lag"), _right("behind", "seconds_behind", " s"),
                      Column("reason"))


def lag(
    group: Annotated[str | None, typer.Option("--group", "-g", help="One group, with every partition.")] = None,
    cluster: ClusterOption = None,
    platform: PlatformOption = DEFAULT_PLATFORM,
    url: UrlOption = None,
    token: TokenOption = None,
    samples: SamplesOption = 3,
    interval: IntervalOption = 1.0,
    output: OutputOption = OutputFormat.table,
) -> None:
    """Consumer lag per group with Burrow's statuses (OK, WARN, STALL, STOP, REWIND, ERR), seconds
    behind, and rewind and reset findings. Exits 1 when a group is STOP, REWIND or ERR."""
    state = _state(platform, url, samples, interval, group, cluster, token)
    groups = [g for c in state["clusters"] for g in c["groups"]]
    if group and not groups:
        raise ConveyorError(f"no consumer group {group!r} with committed offsets"
                            + (f" on cluster {cluster}" if cluster else ""))
    sections = [Section("groups", "consumer groups", _GROUP_COLUMNS, groups)]
    if group and output is OutputFormat.table:  # in the JSON document, each group holds its partitions
        sections += [Section("partitions", f"{g['cluster']} / {g['group']}: partitions", _PARTITION_COLUMNS,
                             g["partitions"]) for g in groups]
    alerts = _alerts(output, [a for a in state["alerts"] if _about_groups(a)], "lag and offset alerts in Alertmanager",
                     state.get("alerts_error"))
    render(output, *sections, *([alerts] if alerts else []))
    raise typer.Exit(1 if any(g["status"] in CRITICAL_STATUSES for g in groups) else 0)


_BROKER_COLUMNS = (
    Column("node"), Column("up", cell=lambda b: "[green]up[/]" if b["up"] else f"[red]down[/] {b['error']}"),
    _right("leaders", "leaders"), _right("replicas", "replicas"), _right("URP", "under_replicated"),
    _right("<min ISR", "under_min_isr"), Column("in/s", cell=lambda b: _bytes(b["bytes_in_per_s"]), justify="right"),
    Column("out/s", cell=lambda b: _bytes(b["bytes_out_per_s"]), justify="right"),
    _right("ISR -/s", "isr_shrinks_per_s"), _right("follower lag", "max_follower_lag"),
    Column("p99 ms produce/fetch/metadata", justify="right",
           cell=lambda b: " / ".join(_num(b["p99_ms"].get(r)) for r in ("Produce", "FetchConsumer", "Metadata"))))


def health(
    cluster: ClusterOption = None,
    platform: PlatformOption = DEFAULT_PLATFORM,
    url: UrlOption = None,
    token: TokenOption = None,
    samples: SamplesOption = 2,
    interval: IntervalOption = 2.0,
    output: OutputOption = OutputFormat.table,
) -> None:
    """Broker health from each broker's JMX exporter as Prometheus last scraped it (ops.prometheus_url,
    or the local one; without one, counts from cluster metadata): replication, controller,
    elections, request times, load per broker and its skew, with the cluster alerts Alertmanager holds. Exits 1 when a
    cluster is CRITICAL: a node not answering, partitions offline or below min ISR, no active
    controller, or an unclean election."""
    state = _state(platform, url, samples, interval, None, cluster, token)
    health_alerts = [a for a in state["alerts"] if not _about_groups(a)]
    code = 1 if any(c["health"]["status"] == "CRITICAL" for c in state["clusters"]) else 0
    if output is OutputFormat.json:
        clusters = [{"cluster": c["name"], **c["health"]} for c in state["clusters"]]
        render(output, clusters=clusters, alerts=health_alerts)
        raise typer.Exit(code)
    for c in state["clusters"]:
        h = c["health"]
        if h["figures_error"]:
            err_console.print(f"{c['name']}: no broker figures: {h['figures_error']}")
        console.print(f"[bold]{c['name']}[/] {_styled(h['status'])}  under-replicated {h['under_replicated']}  "
                      f"under min ISR {h['under_min_isr']}  offline {_num(h['offline_partitions'])}  "
                      f"leader changes {h['leader_changes']} in {_num(h['leader_change_span_s'])} s  skew "
                      + ", ".join(f"{k} {v:.2f}" for k, v in h["skew"].items() if v is not None))
        render(output, Section("brokers", "", _BROKER_COLUMNS, h["brokers"]))
    alerts = _alerts(output, health_alerts, "cluster alerts in Alertmanager", state.get("alerts_error"))
    if alerts:
        render(output, alerts)
    raise typer.Exit(code)


def _bytes(value: float | None) -> str:
    if value is None:
        return "–"
    for unit in ("B", "KiB", "MiB"):
        if value < 1024:
            return f"{value:,.0f} {unit}"
        value /= 1024
    return f"{value:,.1f} GiB"


@app.command()
def watch(
    platform: PlatformOption = DEFAULT_PLATFORM,
    port: PortOption = None,
    host: Annotated[str, typer.Option(envvar="CONVEYOR_OPS_HOST", help="Address to listen on.")] = "127.0.0.1",
) -> None:
    """Run the watch service in the foreground: every ops.interval seconds it samples every
    cluster's consumer groups, reads every broker's figures from Prometheus, and serves the dashboard (/), its JSON API
    (/api/state), /metrics and /healthz. SIGTERM ends the round under way and exits."""
    from conveyor.web.service import watch_service

    raise typer.Exit(serve_service(watch_service(platform_from(platform), host, port)))


def dashboard(platform: PlatformOption = DEFAULT_PLATFORM, port: PortOption = None) -> None:
    """Start the watch service in the background (stopped by `conveyor down`) unless it runs, wait
    for its first round, and print the dashboard's address."""
    from conveyor.runtime.services import service_log_tail, start_service

    model = platform_from(platform)
    port = port or model.ops.port
    pid, started = start_service(model, "ops", ["ops", "watch", "--port", str(port),
                                                "--platform", str(platform.resolve())])
    url = base_url(model.ops.tls, port)
    if not wait_healthy(f"{url}/healthz", 120, verify=trusted(model)):
        raise ConveyorError(f"the ops service did not answer on {url}:\n{service_log_tail(model, 'ops')}")
    console.print(f"ops watch {'started' if started else 'already running'} (pid {pid})")
    console.print(f"dashboard: [bold]{url}/[/]   metrics: {url}/metrics   API: {url}/api/state")
