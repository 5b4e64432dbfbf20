"""``-o json``: every command that prints a table prints the same rows as one JSON document on
stdout (typed values, no markup), reads CONVEYOR_<COMMAND>_OUTPUT like every option, and keeps its
exit status. The commands here need no broker; tests/integration/cli/test_cli_json.py covers the rest."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from typing import Any

import pytest
import yaml
from typer.main import get_command
from typer.testing import CliRunner

from conveyor.cli import app
from conveyor.cli.common import Column, OutputFormat, Section, render

ROOT = Path(__file__).resolve().parents[3]

#: Every command that prints a table.
TABLE_COMMANDS = [
    ["up"], ["status"], ["smoke"], ["config", "check"], ["topics", "plan"], ["topics", "apply"], ["acl", "plan"],
    ["acl", "apply"],
    ["ops", "lag"], ["ops", "health"], ["replicate", "status"], ["lake", "status"], ["balance", "plan"],
    ["balance", "execute"], ["balance", "add-broker"], ["advise", "partitions"], ["views", "get"],
    ["lake", "run"], ["lake", "audit"], ["views", "run"], ["gateway", "generate"],
]


def _option(path: list[str], name: str) -> Any:
    command: Any = get_command(app)
    for part in path:
        command = command.commands[part]
    return next(p for p in command.params if name in getattr(p, "opts", ()))


@pytest.mark.parametrize("path", TABLE_COMMANDS, ids=" ".join)
def test_every_table_command_takes_output_table_or_json(path: list[str]) -> None:
    option = _option(path, "--output")
    assert option.opts == ["--output", "-o"]
    assert option.default == OutputFormat.table


@pytest.mark.parametrize("path", [["balance", "plan"], ["ops", "rules"], ["ops", "dashboards"]], ids=" ".join)
def test_out_is_long_only_so_that_o_is_always_the_output_format(path: list[str]) -> None:
    assert _option(path, "--out").opts == ["--out"]


def test_config_check_as_json_is_the_summary_with_typed_values() -> None:
    result = CliRunner().invoke(app, ["config", "check", "-o", "json", "--platform", str(ROOT / "platform.yaml")])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["platform"] == "conveyor-demo"
    central = next(c for c in document["clusters"] if c["cluster"] == "central")
    assert central["role"] == "read" and central["brokers"] == 3 and central["bootstrap"] is None
    assert central["racks"] == ["r1", "r2", "r3"]
    assert {"topic": "ad-events", "partitions": 12, "replication_factor": 3,
            "min_insync_replicas": 2} in central["topics"]
    assert "[" not in json.dumps(document["clusters"][0]["role"])  # no Rich markup anywhere


def test_the_output_format_reads_its_environment_variable() -> None:
    result = CliRunner().invoke(app, ["config", "check", "--platform", str(ROOT / "platform.yaml")],
                                env={"CONVEYOR_CONFIG_CHECK_OUTPUT": "json"}, auto_envvar_prefix="CONVEYOR")
    assert result.exit_code == 0, result.output
    assert [c["cluster"] for c in json.loads(result.stdout)["clusters"]] == ["dc1", "dc2", "central"]


def test_an_unknown_output_format_is_a_usage_error_naming_the_choices() -> None:
    result = CliRunner().invoke(app, ["config", "check", "-o", "yaml"])
    assert result.exit_code == 2
    assert "'yaml' is not one of 'table', 'json'" in " ".join(result.output.replace("│", " ").split())


def test_status_as_json_keeps_exit_1_when_nothing_runs(tmp_path: Path) -> None:
    data = yaml.safe_load((ROOT / "platform.yaml").read_text())
    data["runtime"]["home"] = str(tmp_path / "home")
    platform = tmp_path / "platform.yaml"
    platform.write_text(yaml.safe_dump(data))
    (tmp_path / "contracts").symlink_to(ROOT / "contracts")
    result = CliRunner().invoke(app, ["status", "-o", "json", "--platform", str(platform)])
    assert result.exit_code == 1, result.output
    document = json.loads(result.stdout)
    assert document["all_running"] is False and document["existing_clusters"] == []
    brokers = [p for p in document["processes"] if p["cluster"] == "central" and "broker" in p["roles"]]
    assert [(b["running"], b["pid"], b["rack"]) for b in brokers] == [(False, None, "r1"), (False, None, "r2"),
                                                                      (False, None, "r3")]
    assert all(isinstance(b["client_port"], int) for b in brokers)


class Colour(str, Enum):
    green = "green"


@dataclass(frozen=True)
class Row:
    name: str
    count: int
    at: dt.datetime
    colour: Colour
    missing: int | None


ROWS = [Row("a", 1200, dt.datetime(2025, 3, 1, 12, tzinfo=dt.timezone.utc), Colour.green, None)]
COLUMNS = (Column("name"), Column("count", cell=lambda r: f"[bold]{r.count:,}[/]"), Column("missing"))


def test_render_json_is_the_rows_fields_typed_beside_the_values(capsys: pytest.CaptureFixture[str]) -> None:
    render(OutputFormat.json, Section("rows", "a title", COLUMNS, ROWS), total=1)
    assert json.loads(capsys.readouterr().out) == {
        "rows": [{"name": "a", "count": 1200, "at": "2025-03-01T12:00:00+00:00", "colour": "green",
                  "missing": None}],
        "total": 1,
    }


def test_render_table_shows_the_cells(capsys: pytest.CaptureFixture[str]) -> None:
    render(OutputFormat.table, Section("rows", "a title", COLUMNS, ROWS), total=1)
    out = capsys.readouterr().out
    assert "a title" in out and "1,200" in out and "[bold]" not in out and "total" not in out


def test_a_real_time_run_reports_its_steady_state_only_once_it_caught_up(capsys):
    from collections import Counter

    from conveyor.cli.views_cmd import _print_realtime_summary
    from conveyor.pipeline.realtime.metrics import BatchReport, RealtimeMetrics

    metrics = RealtimeMetrics()

    def observe(batch_id: int, latency_ms: int) -> dict[str, Any]:
        metrics.observe(BatchReport(batch_id, 10, 10, 1, 1, {}, 0.1, Counter({latency_ms: 10}), True))
        _print_realtime_summary(metrics, 0.0, 60.0, 0, OutputFormat.json)
        printed = capsys.readouterr()
        return {**json.loads(printed.out), "said": printed.err}

    cold = observe(0, 30_000)
    assert cold["caught_up_at_batch"] is None and cold["steady_latency_p99_s"] is None
    assert "no steady state yet: no batch came within 10s of the stream" in cold["said"]
    assert "no batch after it applied an event" in observe(1, 3_000)["said"]
    steady = observe(2, 2_000)
    assert (steady["caught_up_at_batch"], steady["steady_events"], steady["steady_latency_p99_s"]) == (1, 10, 2.0)
    assert steady["latency_p99_s"] == 30.0 and "steady state (the batches after batch 1" in steady["said"]
