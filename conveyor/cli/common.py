"""What every command shares: the --platform option, the console, error reporting, and tables that
print as JSON with ``-o json``."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated, Any
from uuid import UUID

import typer
from rich.console import Console, JustifyMethod, OverflowMethod
from rich.table import Table

from conveyor.config import DEFAULT_PLATFORM_FILE, Platform, load_platform, load_resolved_platform, parse_duration_ms
from conveyor.config.resolved import read_resolved_view, with_resolved_view, write_resolved_view
from conveyor.service import Endpoint

# Rich assumes 80 columns when output is not a terminal, which truncates tables in CI logs and
# pipes; there, lines may be as long as they need.
console = Console(width=None if sys.stdout.isatty() else 200)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 200)

PlatformOption = Annotated[
    Path,
    typer.Option(
        "--platform",
        "-p",
        envvar="CONVEYOR_PLATFORM",
        help="The platform file that describes clusters, topics and services.",
        show_default=True,
        # load_platform says what is wrong with the file in one line; Click's own check would
        # answer an unreadable file with a usage box instead.
        readable=False,
    ),
]
DEFAULT_PLATFORM = Path(DEFAULT_PLATFORM_FILE)


def platform_from(path: Path) -> Platform:
    """The platform every command but the runtime's own works with: platform.yaml with the resolved
    view of `conveyor up` laid over it (conveyor.config.resolved)."""
    return load_resolved_platform(path)


def platform_to_apply(path: Path, keep: bool) -> Platform:
    """:func:`platform_from`, with the SCRAM users of the clusters `conveyor up` started as
    platform.yaml asks for them now, not as it did at up; ``keep``: write them into the view, so
    that the services added since connect with them (`acl apply`, `topics apply`)."""
    from conveyor.runtime.endpoints import with_current_users
    from conveyor.runtime.security import local_security

    platform = load_platform(path)
    view = read_resolved_view(platform)
    if view is not None:
        view = with_current_users(platform, view, local_security(platform.home))
        if keep:
            write_resolved_view(platform, view)
        platform = with_resolved_view(platform, view)
    return platform


def platform_with_granted(path: Path, keep: bool) -> Platform:
    """:func:`platform_to_apply` with the topics granted through the bus (the contract registry's),
    so that they keep their ACLs and --prune leaves them alone: `acl plan` and `apply`, `topics
    plan` and `apply`."""
    from conveyor.bus.registry import with_granted

    return with_granted(platform_to_apply(path, keep))


MetricsPortOption = Annotated[int | None, typer.Option(
    "--metrics-port", help="Serve /metrics and /healthz on this port (0: one the OS picks).")]
MetricsHostOption = Annotated[str, typer.Option(
    "--metrics-host", help="Address /metrics and /healthz listen on (0.0.0.0 for a Prometheus elsewhere).")]
DEFAULT_METRICS_HOST = "127.0.0.1"
#: `start`'s copy of a batch job's --metrics-file, handed to the service it starts.
MetricsFileOption = Annotated[Path | None, typer.Option(
    "--metrics-file", help="Its metrics file (node_exporter textfile format), as `run` takes it.")]


def start_local(platform: Platform, name: str, args: list[str], metrics_port: int | None = None,
                metrics_file: Path | None = None, note: str = "") -> None:
    """Start ``conveyor <args>`` (with the metrics options given) as service ``name`` of the local
    platform, stopped by `conveyor down`, and say so."""
    from conveyor.runtime.services import service_log_file, start_service

    args = [*args, *(["--metrics-port", str(metrics_port)] if metrics_port is not None else []),
            *(["--metrics-file", str(metrics_file.resolve())] if metrics_file is not None else [])]
    pid, started = start_service(platform, name, args)
    console.print(f"{name} {'started' if started else 'already running'} (pid {pid}){note}; its log: "
                  f"{service_log_file(platform, name)}")


def endpoint(host: str, port: int | None) -> Endpoint:
    return Endpoint(host=host, port=port)


YesOption = Annotated[bool, typer.Option("--yes", help="Confirm without asking (for scripts).")]
StrictOption = Annotated[bool, typer.Option("--strict", help="Fail on durability warnings too (for CI).")]


def confirm(name: str, what: str, yes: bool) -> None:
    """A typed confirmation before a command changes a cluster: the operator types ``name`` (a
    cluster's or the platform's), or passes ``--yes``; anything else exits 1 having changed nothing."""
    if yes:
        return
    # On stderr, so that stdout holds a command's -o json document alone.
    answer = typer.prompt(f"type {name} to {what}", default="", show_default=False, err=True)
    if answer != name:
        err_console.print("not confirmed; nothing was changed")
        raise typer.Exit(1)


class OutputFormat(str, Enum):
    table = "table"
    json = "json"


OutputOption = Annotated[OutputFormat, typer.Option(
    "--output", "-o", case_sensitive=False,
    help="table for people; json for scripts: one JSON document on stdout, the same rows with typed values.")]


@dataclass(frozen=True)
class Column:
    """One column of a table: its header, and what a row shows in it, a field of the row (``key``,
    the header by default) or ``cell(row)``; either may carry Rich markup."""

    header: str
    key: str | None = None
    cell: Callable[[Any], str] | None = None
    justify: JustifyMethod = "left"
    overflow: OverflowMethod = "ellipsis"

    def show(self, row: Any) -> str:
        if self.cell is not None:
            return self.cell(row)
        value = field_of(row, self.key or self.header)
        return "" if value is None else str(value)


@dataclass(frozen=True)
class Section:
    """Rows of one kind: a table for people, a list of objects named ``name`` in the JSON document."""

    name: str
    title: str
    columns: Sequence[Column]
    rows: Sequence[Any]
    show_lines: bool = False


def field_of(row: Any, key: str) -> Any:
    return row[key] if isinstance(row, Mapping) else getattr(row, key)


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    if isinstance(value, (Path, UUID)):
        return str(value)
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def render(output: OutputFormat, *sections: Section, **values: Any) -> None:
    """Print ``sections`` as Rich tables, or as one JSON object on stdout: each section's rows (a
    dataclass's fields, a mapping's items) under its name, beside ``values`` (which the table form
    leaves to the command's own lines)."""
    if output is OutputFormat.json:
        document = {**{s.name: list(s.rows) for s in sections}, **values}
        typer.echo(json.dumps(document, indent=2, default=_jsonable))
        return
    for section in sections:
        table = Table(title=section.title, show_lines=section.show_lines)
        for column in section.columns:
            table.add_column(column.header, justify=column.justify, overflow=column.overflow)
        for row in section.rows:
            table.add_row(*(column.show(row) for column in section.columns))
        console.print(table)


def say(output: OutputFormat, text: str) -> None:
    """A line for people beside the tables: on stdout with a table, on stderr beside a JSON document
    (so stdout holds the document alone)."""
    (console if output is OutputFormat.table else err_console).print(text, highlight=False)


class Report:
    """What a command shows as it goes: for people, each table and line at once; for scripts, the
    sections and values gathered into one JSON document that :meth:`close` prints."""

    def __init__(self, output: OutputFormat) -> None:
        self.output = output
        self.sections: list[Section] = []
        self.values: dict[str, Any] = {}

    def add(self, *sections: Section, **values: Any) -> None:
        if self.output is OutputFormat.table:
            render(self.output, *sections)
        else:
            self.sections += sections
            self.values.update(values)

    def say(self, text: str) -> None:
        say(self.output, text)

    def close(self, **values: Any) -> None:
        if self.output is OutputFormat.json:
            render(self.output, *self.sections, **self.values, **values)


def durability_section(findings: Sequence[Any]) -> Section:
    """The durability lint's warnings (conveyor.topics.lint) as a section of `config check` and
    `topics plan`."""
    return Section("warnings", f"durability warnings ({len(findings)})",
                   (Column("topic"), Column("cluster"), Column("rule"), Column("why", "message", overflow="fold")),
                   findings)


def window_seconds(text: str) -> float:
    """``--window``: a span such as 30s or 5m, in seconds; ``0`` for none."""
    if text.strip() == "0":
        return 0.0
    try:
        ms = parse_duration_ms(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--window") from None
    if ms < 0:
        raise typer.BadParameter(f"must be a span such as 5m, or 0 (got {text!r})", param_hint="--window")
    return ms / 1000
