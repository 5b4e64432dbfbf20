"""``conveyor lake run``, ``status`` and ``audit``: land topics in the lake (Apache Iceberg) exactly
once with PySpark, show what it holds, and audit it against what the gateways accepted.

Exit statuses: 0 done; 1 an error (nothing half-done is visible); 2 a bad platform file;
3 the run found data lost to retention (recorded in lake.ops.gaps, and it went on);
4 the audit found events lost or duplicated in a complete hour.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from datetime import datetime, timedelta, timezone
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.filesize import decimal
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from conveyor.cli.common import (DEFAULT_METRICS_HOST, DEFAULT_PLATFORM, Column, MetricsFileOption, MetricsHostOption,
                                 MetricsPortOption, OutputFormat, OutputOption, PlatformOption, Section, console,
                                 endpoint, err_console, field_of, platform_from, render, say, start_local)
from conveyor.config import duration_text, parse_duration_ms
from conveyor.pipeline.completeness import floor_hour, is_complete
from conveyor.service import serve

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from rich.console import Console

    from conveyor.pipeline.audit import HourAudit
    from conveyor.pipeline.lake import RunSummary, TopicRun

app = typer.Typer(help="The data lake (Apache Iceberg): land topics in it exactly once, see what it holds, audit "
                  "it against what the gateways accepted.", no_args_is_help=True)

EXIT_AUDIT_FAILED = 4

log = logging.getLogger("conveyor.lake")

TopicsOption = Annotated[
    list[str] | None,
    typer.Option("--topics", "-t", envvar="CONVEYOR_TOPICS",
                 help="Only these topics (repeatable; default: pipeline.lake.topics)."),
]


@contextmanager
def _progress(spark: SparkSession, drawn_on: Console) -> Iterator[Callable[[str, str], None]]:
    """A step callback drawing one line per topic, with the running Spark tasks."""
    from conveyor.pipeline.progress import SparkTasks

    tasks: dict[str, int] = {}
    current = {"topic": "", "step": ""}
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=drawn_on, transient=True) as progress:
        def step(topic: str, what: str) -> None:
            if topic not in tasks:
                tasks[topic] = progress.add_task(topic)
            current.update(topic=topic, step=what)
            progress.update(tasks[topic], description=f"{topic}: {what}")

        def spark_tasks(done: int, total: int) -> None:
            topic = current["topic"]
            if topic in tasks:
                progress.update(tasks[topic], description=f"{topic}: {current['step']} (tasks {done}/{total})")

        with SparkTasks(spark, spark_tasks):
            yield step


@contextmanager
def _logged_steps() -> Iterator[Callable[[str, str], None]]:
    yield lambda topic, what: log.info("%s: %s", topic, what)


def _ranges(run: TopicRun) -> str:
    return " ".join(f"p{r.partition} {r.start}..{r.end - 1}" for r in run.ranges if r.size > 0) or "nothing new"


def _count(key: str) -> Column:
    return Column(key.replace("_", " "), cell=lambda row: f"{field_of(row, key):,}")


_RUN_COLUMNS = (Column("topic"), Column("offset ranges read", cell=_ranges, overflow="fold"), _count("records_read"),
                _count("checked"), _count("landed"), _count("quarantined"), _count("duplicates_dropped"),
                Column("bytes", cell=lambda run: decimal(run.bytes_read)), Column("seconds", cell=lambda r: f"{r.seconds:.1f}"))


def print_summary(summary: RunSummary, output: OutputFormat) -> None:
    render(output, Section("topics", f"lake run {summary.run_id[:8]}: {summary.seconds:.1f}s, "
                           f"{summary.records_read:,} records, {decimal(summary.bytes_read)}, "
                           f"{summary.rate:,.0f} records/s", _RUN_COLUMNS, summary.topics),
           run_id=summary.run_id, started_at=summary.started_at, seconds=summary.seconds, lost=summary.lost)
    for run in summary.topics:
        if run.records_read:
            kept = "the gateway's verdicts kept" if run.trust.trusted else "every record checked"
            say(output, f"{run.topic}: {kept} ({run.trust.why})")
        if run.orphans_deleted:
            say(output, f"{run.topic}: deleted {run.orphans_deleted} file(s) left by an interrupted run")
        for gap in run.gaps:
            err_console.print(
                f"[bold red]DATA LOST:[/] {gap.topic}[{gap.partition}] offsets {gap.first}..{gap.last} "
                f"({gap.count:,} records) were deleted by retention before they landed; recorded in lake.ops.gaps"
            )


@app.command()
def run(
    platform: PlatformOption = DEFAULT_PLATFORM,
    topics: TopicsOption = None,
    once: Annotated[bool, typer.Option("--once", help="One run, then exit (the default).")] = False,
    every: Annotated[str | None, typer.Option("--every", envvar="CONVEYOR_LAKE_EVERY",
                                              help="Run again after this interval (30m, 1h) until SIGTERM.")] = None,
    metrics_file: Annotated[Path | None, typer.Option(
        "--metrics-file", envvar="CONVEYOR_LAKE_METRICS_FILE",
        help="After each run, write the metrics here (node_exporter textfile format).")] = None,
    metrics_port: Annotated[int | None, typer.Option(
        "--metrics-port", envvar="CONVEYOR_LAKE_METRICS_PORT",
        help="With --every: serve /metrics and /healthz on this port.")] = None,
    metrics_host: MetricsHostOption = DEFAULT_METRICS_HOST,
    output: OutputOption = OutputFormat.table,
) -> None:
    """Land topics of pipeline.source in Iceberg exactly once: each run reads from the offsets
    committed with the table's data to the partitions' current ends. Bad records go to quarantine;
    data retention deleted before it landed is recorded as a gap and the run goes on (exit 3). With -o json,
    each run prints one JSON document."""
    from conveyor.bus.registry import with_granted
    from conveyor.pipeline.tables import lake_topics
    from conveyor.pipeline.lake_service import LakeConfig, LakeJob, LakeScheduler
    from conveyor.pipeline.schedule import Schedule

    if once and every:
        raise typer.BadParameter("give --once or --every, not both")
    try:
        interval = parse_duration_ms(every) / 1000 if every else None
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="--every") from None
    model = with_granted(platform_from(platform))  # requested topics the lake lands too
    lake_topics(model, topics)  # refuse unknown topics before Spark starts
    from conveyor.pipeline.spark import start_spark
    spark = start_spark(model, "conveyor-lake", err_console.status)
    # A service, or a run with no terminal to draw on (a CronJob's pod, a pipe), logs its steps
    # instead: its log shows where a slow run spent its time.
    drawn_on = console if output is OutputFormat.table else err_console
    progress = partial(_progress, spark, drawn_on) if interval is None and drawn_on.is_terminal else _logged_steps
    job = LakeJob(spark, LakeConfig(model, topics, metrics_file), progress,
                  partial(print_summary, output=output))
    if interval is None:
        raise typer.Exit(job.once())
    scheduler = LakeScheduler(job, Schedule(interval), _print_run_failed)
    raise typer.Exit(serve(scheduler, endpoint(metrics_host, metrics_port)))


@app.command()
def start(platform: PlatformOption = DEFAULT_PLATFORM, metrics_port: MetricsPortOption = None,
          metrics_file: MetricsFileOption = None) -> None:
    """Start `lake run --every` on pipeline.lake.every as a background service of the local platform
    (stopped by `conveyor down`): the lake on its schedule, as a deployment's timer runs it."""
    from conveyor.bus.registry import with_granted
    from conveyor.pipeline.tables import lake_topics

    model = with_granted(platform_from(platform))
    lake_topics(model)  # a platform without lake topics is refused here, not in the service's log
    every = duration_text(model.pipeline.lake.every)
    start_local(model, "lake", ["lake", "run", "--every", every, "--platform", str(platform.resolve())],
                metrics_port, metrics_file, f", a run every {every}")


def _print_run_failed(err: Exception) -> None:
    err_console.print(f"[bold red]run failed:[/] {err}", highlight=False)


def _audit_result(hour: HourAudit) -> str:
    if hour.failed:
        return "MISMATCH"
    if hour.warned:
        return "lost (at least once)"
    if not hour.complete:
        return "pending"
    if not hour.held:
        return "not held"
    return "ok" if not hour.unaudited else "ok, unaudited events"


_RESULT_STYLE = {"MISMATCH": "bold red", "lost (at least once)": "yellow", "pending": "yellow", "not held": "dim",
                 "ok": "green",
                 "ok, unaudited events": "yellow"}
_AUDIT_COLUMNS = (Column("topic"), Column("hour (UTC)", cell=lambda h: h["hour"].strftime("%Y-%m-%d %H:00")),
                  _count("produced"), _count("landed"), _count("lost"), _count("duplicates"), _count("unaudited"),
                  Column("result", cell=lambda h: f"[{_RESULT_STYLE[h['result']]}]{h['result']}[/]"))


@app.command()
def audit(platform: PlatformOption = DEFAULT_PLATFORM, topics: TopicsOption = None,
          output: OutputOption = OutputFormat.table) -> None:
    """Compare what the gateways accepted per (topic, hour), counted from the writable clusters'
    logs, with the rows landed in the lake: events lost, duplicated, or landed without being
    accepted there. Exits 4 when a complete hour of an exact topic lost or duplicated events; a
    topic delivered at least once keeps its copies, and its losses are a warning. Hours still within
    the allowed lateness are shown as pending; hours retention has deleted records of from those
    logs as not held (their produced count is no longer whole)."""
    from conveyor.pipeline.audit import audit_lake
    from conveyor.bus.registry import with_granted
    from conveyor.pipeline.tables import lake_topics

    model = with_granted(platform_from(platform))  # requested topics the lake lands too
    lake_topics(model, topics)
    from conveyor.pipeline.spark import start_spark
    spark = start_spark(model, "conveyor-audit", err_console.status)
    with err_console.status("counting produced and landed events per hour"):
        hours = audit_lake(spark, model, topics)
    rows = [{**asdict(h), "lost": h.lost, "duplicates": h.duplicates, "unaudited": h.unaudited,
             "result": _audit_result(h)} for h in hours]
    render(output, Section("hours", "audit: accepted events against the lake", _AUDIT_COLUMNS, rows))
    failed, warned = [h for h in hours if h.failed], [h for h in hours if h.warned]
    say(output, f"{len(hours)} hour(s) audited, {len(failed)} with lost or duplicated events, "
        f"{sum(h.lost for h in failed):,} lost, {sum(h.duplicates for h in failed):,} duplicated")
    if warned:
        say(output, f"{len(warned)} hour(s) of topics delivered at least once lost {sum(h.lost for h in warned):,} "
                    "event(s): a warning, not a failure (topics.<name>.delivery)")
    raise typer.Exit(EXIT_AUDIT_FAILED if failed else 0)


def _when(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S") if moment else "never"


def _complete(s: dict[str, Any]) -> str:
    return f"{s['last_complete_hour']:%Y-%m-%d %H}:59" if s["last_complete_hour"] else "nothing yet"


_COLUMNS = (
    Column("topic"), Column("rows", cell=lambda s: f"{s['rows']:,}"), Column("files", cell=lambda s: f"{s['files']:,}"),
    Column("size", cell=lambda s: decimal(s["bytes"])), Column("quarantined", cell=lambda s: f"{s['quarantined']:,}"),
    Column("lost", cell=lambda s: f"[bold red]{s['lost']:,} in {s['gaps']} gap(s)[/]" if s["lost"] else "0"),
    Column("last run", cell=lambda s: _when(s["last_run"])), Column("complete through", cell=_complete),
    Column("yesterday", cell=lambda s: "[green]landed[/]" if s["yesterday_complete"] else "[yellow]not yet[/]"),
    Column("pending", cell=lambda s: f"{s['pending']:,}" if s["pending"] is not None else "Kafka unreachable"))


@app.command()
def status(platform: PlatformOption = DEFAULT_PLATFORM, topics: TopicsOption = None,
           output: OutputOption = OutputFormat.table) -> None:
    """Per topic: rows, files and size in the lake, quarantined records, data lost to retention,
    the last run, the last complete hour, whether yesterday is complete (yesterday must land by
    01:00), and the offsets still waiting in Kafka."""
    from conveyor.pipeline.catalog import describe
    from conveyor.bus.registry import with_granted
    from conveyor.pipeline.tables import lake_topics
    from conveyor.pipeline.status import lake_status

    model = with_granted(platform_from(platform))  # requested topics the lake lands too
    lake_topics(model, topics)
    from conveyor.pipeline.spark import start_spark
    spark = start_spark(model, "conveyor-lake-status", err_console.status)
    with err_console.status("reading the lake's tables"):
        statuses = lake_status(spark, model, topics)
    yesterday_last_hour = floor_hour(datetime.now(timezone.utc)).replace(hour=0) - timedelta(hours=1)
    rows = [{**asdict(s), "yesterday_complete": is_complete(yesterday_last_hour, s.last_complete_hour)}
            for s in statuses]
    render(output, Section("topics", f"lake: {describe(model)} (times in UTC)", _COLUMNS, rows),
           catalog=describe(model), warehouse=model.pipeline.catalog.warehouse)
