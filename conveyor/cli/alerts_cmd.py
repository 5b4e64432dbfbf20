"""``conveyor ops alerts`` and ``ops silence``: the alerts Alertmanager holds (every alert of the
platform is a Prometheus rule), and silences for them. Registered under the ``ops`` group."""

from __future__ import annotations

from typing import Annotated

import typer

from conveyor.cli.common import (DEFAULT_PLATFORM, Column, OutputFormat, OutputOption, PlatformOption, Section, console,
                                 platform_from, render)
from conveyor.config import Platform
from conveyor.errors import ConveyorError
from conveyor.ops.alertmanager import AlertmanagerClient
from conveyor.tls import trusted

AlertmanagerOption = Annotated[str | None, typer.Option(
    "--alertmanager", envvar="CONVEYOR_ALERTMANAGER_URL",
    help="Alertmanager's base URL (default: ops.alertmanager_url, or the one `conveyor up` started).")]

_STATE_STYLE = {"active": "bold red", "suppressed": "dim", "unprocessed": "yellow"}
_COLUMNS = (
    Column("alert", "name"), Column("severity"),
    Column("state", cell=lambda a: f"[{_STATE_STYLE.get(a.state, '')}]{a.state}[/]"),
    Column("where", cell=lambda a: " ".join(f"{k}={a.labels[k]}" for k in ("cluster", "node", "instance", "subject",
                                                                             "topic", "group") if k in a.labels)),
    Column("summary"),
)


def _client(model: Platform, url: str | None) -> AlertmanagerClient:
    url = url or model.ops.alertmanager_url
    if url is None:
        raise ConveyorError("no Alertmanager: give --alertmanager URL, set ops.alertmanager_url, or add "
                            "runtime.alertmanager to platform.yaml and run `conveyor up`")
    return AlertmanagerClient(url, verify=trusted(model))


def alerts(platform: PlatformOption = DEFAULT_PLATFORM, alertmanager: AlertmanagerOption = None,
           output: OutputOption = OutputFormat.table) -> None:
    """The alerts Alertmanager holds now, from Prometheus's rules (conveyor ops rules), active or
    silenced. Exits 1 when a critical alert is active."""
    client = _client(platform_from(platform), alertmanager)
    try:
        found = client.alerts()
    finally:
        client.close()
    render(output, Section("alerts", f"alerts in Alertmanager at {client.url}", _COLUMNS, found))
    raise typer.Exit(1 if any(a.severity == "critical" and a.state == "active" for a in found) else 0)


def silence(
    alertname: Annotated[str, typer.Argument(help="The alert to silence (its alertname label).")],
    matcher: Annotated[list[str] | None, typer.Option(
        "--match", "-m", help="Only alerts with this label too, as name=value (repeatable): -m cluster=central.")] = None,
    hours: Annotated[float, typer.Option("--hours", min=0.01, help="How long the silence lasts.")] = 2.0,
    comment: Annotated[str, typer.Option("--comment", help="Why, for whoever sees the silence.")] = "silenced with conveyor",
    platform: PlatformOption = DEFAULT_PLATFORM,
    alertmanager: AlertmanagerOption = None,
) -> None:
    """Silence an alert in Alertmanager for a while: it stays visible (suppressed) but notifies no one."""
    matchers = {"alertname": alertname}
    for item in matcher or ():
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ConveyorError(f"--match {item!r} is not name=value")
        matchers[name] = value
    client = _client(platform_from(platform), alertmanager)
    try:
        silence_id = client.silence(matchers, hours, comment)
    finally:
        client.close()
    console.print(f"silenced {', '.join(f'{k}={v}' for k, v in matchers.items())} for {hours:g} h (silence {silence_id})")
