"""``conveyor pipeline lake``, ``audit`` and ``realtime``: the PySpark jobs over the central cluster.

Exit statuses: 0 done; 1 an error (nothing half-done is visible); 2 a bad platform file;
3 the lake run found data lost to retention (recorded in lake.ops.gaps, and it went on);
4 the audit found events lost or duplicated in a complete hour.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from enum import Enum
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.filesize import decimal
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from conveyor.cli.common import (DEFAULT_METRICS_HOST, DEFAULT_PLATFORM, Column, MetricsHostOption, OutputFormat,
                                 OutputOption, PlatformOption, Section, console, endpoint, err_console, field_of,
                                 platform_from, render, say)
from conveyor.config import Platform, parse_duration_ms
from conveyor.service import serve

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from conveyor.pipeline.audit import HourAudit
    from conveyor.pipeline.lake import RunSummary, TopicRun

app = typer.Typer(help="The PySpark pipelines: land topics in the lake exactly once, audit what landed, keep "
                  "the real-time views in Redis.",
                  no_args_is_help=True)

EXIT_AUDIT_FAILED = 4

class StartingOffsets(str, Enum):
    earliest = "earliest"
    latest = "latest"


class RealtimeMode(str, Enum):
    micro_batch = "micro-batch"
    real_time = "real-time"


TopicsOption = Annotated[
    list[str] | None,
    typer.Option("--topics", "-t", envvar="CONVEYOR_TOPICS",
                 help="Only these topics (repeatable; default: pipeline.lake.topics)."),
]


def start_spark(platform: Platform, app_name: str) -> SparkSession:
    from conveyor.pipeline.spark import spark_session

    with err_console.status("starting Spark (the first start downloads its jars from Maven Central)"):
        return spark_session(platform, app_name)


@contextmanager
def _progress(spark: SparkSession, output: OutputFormat) -> Iterator[Callable[[str, str], None]]:
    """A step callback drawing one line per topic, with the running Spark tasks."""
    from conveyor.pipeline.progress import SparkTasks

    tasks: dict[str, int] = {}
    current = {"topic": "", "step": ""}
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=console if output is OutputFormat.table else err_console, transient=True) as progress:
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
def lake(
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
    spark = start_spark(model, "conveyor-lake")
    job = LakeJob(spark, LakeConfig(model, topics, metrics_file), partial(_progress, spark, output),
                  partial(print_summary, output=output))
    if interval is None:
        raise typer.Exit(job.once())
    scheduler = LakeScheduler(job, Schedule(interval), _print_run_failed)
    raise typer.Exit(serve(scheduler, endpoint(metrics_host, metrics_port)))


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
    spark = start_spark(model, "conveyor-audit")
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


# --- conveyor pipeline realtime (docs/realtime.md) -------------------------------------------------
if TYPE_CHECKING:
    from conveyor.pipeline.realtime.metrics import RealtimeMetrics


def _print_realtime_summary(metrics: RealtimeMetrics, started: float, ended: float, behind: int,
                            output: OutputFormat) -> None:
    from conveyor.pipeline.realtime.metrics import CAUGHT_UP_WITHIN, seconds_text

    seconds = ended - started
    reports = list(metrics.reports)
    rows = [{"batch": r.batch_id, "replay": not r.first_attempt, "records": r.records, "events_applied": r.applied,
             "keys": r.keys, "rejected": sum(r.rejects.values()), "seconds": r.seconds,
             "latency_p50_s": r.latency().get(0.5), "latency_p99_s": r.latency().get(0.99)} for r in reports[-10:]]
    columns = (Column("batch", cell=lambda r: f"{r['batch']}{' (replay)' if r['replay'] else ''}", justify="right"),
               *(Column(key.replace("_", " "), cell=lambda r, key=key: f"{r[key]:,}", justify="right")
                 for key in ("records", "events_applied", "keys", "rejected")),
               Column("seconds", cell=lambda r: f"{r['seconds']:.2f}", justify="right"),
               Column("latency p50", cell=lambda r: seconds_text(r["latency_p50_s"]), justify="right"),
               Column("latency p99", cell=lambda r: seconds_text(r["latency_p99_s"]), justify="right"))
    records = sum(r.records for r in reports)
    overall = metrics.run_latency()
    steady = metrics.steady_state()
    render(output, Section("batches", f"real-time views: the last batches of {len(reports)} in {seconds:.0f}s",
                           columns, rows),
           records=records, seconds=seconds, caught_up_at_batch=steady.caught_up_at, steady_events=steady.events,
           steady_latency_p50_s=steady.latency.get(0.5), steady_latency_p99_s=steady.latency.get(0.99),
           latency_p50_s=overall.get(0.5), latency_p99_s=overall.get(0.99), records_behind=behind)
    whole = (f"whole run, start-up and backlog included: p50 {seconds_text(overall.get(0.5))}, "
             f"p99 {seconds_text(overall.get(0.99))}")
    say(output, f"{records:,} records ({records / seconds:,.0f}/s). Latency from event time to Redis write:")
    if steady.events:
        say(output, f"steady state (the batches after batch {steady.caught_up_at}, the first within "
            f"{CAUGHT_UP_WITHIN:.0f}s of the stream; {steady.events:,} events): "
            f"p50 {seconds_text(steady.latency.get(0.5))}, p99 {seconds_text(steady.latency.get(0.99))}; {whole}")
    else:
        last_p99 = reports[-1].latency().get(0.99) if reports else None
        why = (f"batch {steady.caught_up_at} came within {CAUGHT_UP_WITHIN:.0f}s of the stream, but no batch after it "
               "applied an event" if steady.caught_up_at is not None else
               f"no batch came within {CAUGHT_UP_WITHIN:.0f}s of the stream (the last one's p99 "
               f"{seconds_text(last_p99)}): the job was still working off its start-up backlog")
        say(output, f"no steady state yet: {why}; run it longer to see its steady-state latency; {whole}")
    if behind:
        say(output, f"still {behind:,} records behind the stream at the last batch (its batches were capped at "
            "pipeline.realtime.max_records_per_batch)")


@app.command()
def realtime(
    platform: PlatformOption = DEFAULT_PLATFORM,
    views: Annotated[list[str] | None, typer.Option(
        "--views", "-v", envvar="CONVEYOR_REALTIME_VIEWS",
        help="Only these views (repeatable; default: every view of pipeline.realtime). A job is its set of "
             "views: each set has its own checkpoint.")] = None,
    metrics_port: Annotated[int | None, typer.Option(
        "--metrics-port", envvar="CONVEYOR_REALTIME_METRICS_PORT", help="Serve /metrics and /healthz on this port.")]
        = None,
    metrics_host: MetricsHostOption = DEFAULT_METRICS_HOST,
    metrics_file: Annotated[Path | None, typer.Option(
        "--metrics-file", envvar="CONVEYOR_REALTIME_METRICS_FILE",
        help="After each batch, write the metrics here (node_exporter textfile format).")] = None,
    run_for: Annotated[str | None, typer.Option(
        "--for", envvar="CONVEYOR_REALTIME_FOR", help="Stop after this long (60s, 10m) and print the latency.")] = None,
    available_now: Annotated[bool, typer.Option(
        "--available-now", help="Read what the topics hold now, then stop (a catch-up run).")] = False,
    start_from: Annotated[StartingOffsets | None, typer.Option(
        "--from", help="Where a new job (no checkpoint yet) starts reading: earliest or latest (default: "
                       "pipeline.realtime.starting_offsets). A job with a checkpoint always resumes from it.")]
        = None,
    mode: Annotated[RealtimeMode | None, typer.Option(
        "--mode", help="micro-batch (a batch every pipeline.realtime.trigger) or real-time (Spark's real-time "
                       "mode: tasks stay up and write as records arrive; a slot per partition). Default: "
                       "pipeline.realtime.mode. A job keeps its mode until --rebuild.")] = None,
    rebuild_views: Annotated[bool, typer.Option(
        "--rebuild", help="Start the job over, as after Redis lost data: delete its checkpoint and its views, "
                          "state and event id claims in Redis, then count the topics again from the earliest "
                          "offsets Kafka holds.")] = False,
    output: OutputOption = OutputFormat.table,
) -> None:
    """Keep the views of pipeline.realtime in Redis up to date from pipeline.source: one Structured
    Streaming query, exactly once per key and window; late and malformed events go to the side
    output (pipeline.realtime.rejects_topic) with the reason. Runs until SIGTERM unless --for or
    --available-now is given."""
    from conveyor.pipeline.realtime.job import rebuild
    from conveyor.pipeline.realtime.plan import job_views
    from conveyor.pipeline.realtime.service import RealtimeConfig, RealtimeService

    try:
        seconds = parse_duration_ms(run_for) / 1000 if run_for else None
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="--for") from None
    model = platform_from(platform)
    if rebuild_views:
        if start_from is StartingOffsets.latest:
            raise typer.BadParameter("a rebuild counts the topics from the earliest offsets", param_hint="--from")
        start_from = StartingOffsets.earliest
    changes = {**({"starting_offsets": start_from.value} if start_from is not None else {}),
               **({"mode": mode.value} if mode is not None else {})}
    if changes:
        model = model.model_copy(update={"pipeline": model.pipeline.model_copy(update={
            "realtime": model.pipeline.realtime.model_copy(update=changes)})})
    if available_now and model.pipeline.realtime.mode == "real-time":
        raise typer.BadParameter("real-time mode runs until stopped (or for --for)", param_hint="--available-now")
    chosen = job_views(model, views)  # refuse unknown views before Spark starts
    spark = start_spark(model, "conveyor-realtime")
    if rebuild_views:
        rebuild(spark, model, chosen)
        say(output, f"rebuilding views {', '.join(chosen)}: checkpoint and Redis data deleted, counting from the "
            "earliest offsets")
    service = RealtimeService(spark, RealtimeConfig(model, chosen, seconds, available_now, metrics_file),
                              partial(_print_realtime_summary, output=output))
    say(output, f"real-time views {', '.join(chosen)}: streaming from {model.pipeline.source}")
    raise typer.Exit(serve(service, endpoint(metrics_host, metrics_port)))
# --- end of conveyor pipeline realtime -------------------------------------------------------------
