"""``conveyor ops rules`` and ``ops dashboards``: the files operators load into their own tools."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
import yaml

from conveyor.cli.common import DEFAULT_PLATFORM, PlatformOption, console, platform_from


def rules(
    platform: PlatformOption = DEFAULT_PLATFORM,
    out: Annotated[Path | None, typer.Option("--out", help="Write the rules file here (default: stdout).")]
    = None,
) -> None:
    """Write a Prometheus alerting rules file for the metrics Conveyor exports: broker health, lag,
    replication gaps, the lake's completeness, the services, and the broker hosts (node_exporter's
    names), with the thresholds of platform.yaml's ops section. Check it with `promtool check rules FILE`; load it with Prometheus's rule_files."""
    from conveyor.ops.rules import rules_document

    model = platform_from(platform)
    text = "# Written by `conveyor ops rules` from platform.yaml; rules of docs/ops.md.\n" + yaml.safe_dump(
        rules_document(model.ops, model.relaxed_topics()), sort_keys=False, width=120)
    if out is None:
        typer.echo(text, nl=False)
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    console.print(f"wrote {out}")


def dashboards(
    out: Annotated[Path, typer.Option("--out", help="Folder for the dashboard files.")] = Path("dashboards"),
) -> None:
    """Write Grafana dashboards (brokers, gateway, replication, lake, real-time views, dispatcher,
    broker hosts) as JSON files over the metrics Conveyor exports; import them in Grafana with a Prometheus data source."""
    from conveyor.ops.grafana import DASHBOARDS, dashboard_document

    out.mkdir(parents=True, exist_ok=True)
    for dashboard in DASHBOARDS:
        path = out / f"{dashboard.uid}.json"
        path.write_text(json.dumps(dashboard_document(dashboard), indent=2) + "\n")
        console.print(f"wrote {path}")
