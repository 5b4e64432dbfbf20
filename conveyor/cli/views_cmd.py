"""``conveyor views run`` and ``get``: keep the real-time views in Redis up to date with a PySpark
Structured Streaming job (docs/realtime.md), and read them (the Python API is
:mod:`conveyor.pipeline.realtime.views`)."""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from conveyor.cli.common import (DEFAULT_METRICS_HOST, DEFAULT_PLATFORM, Column, MetricsFileOption, MetricsHostOption,
                                 MetricsPortOption, OutputFormat, OutputOption, PlatformOption, Section, endpoint,
                                 err_console, platform_from, render, say, start_local)
from conveyor.config import parse_duration_ms
from conveyor.service import serve

if TYPE_CHECKING:
    from conveyor.pipeline.realtime.metrics import RealtimeMetrics

app = typer.Typer(help="The real-time views in Redis: keep them up to date from pipeline.source, and read them.",
                  no_args_is_help=True)


class StartingOffsets(str, Enum):
    earliest = "earliest"
    latest = "latest"


class RealtimeMode(str, Enum):
    micro_batch = "micro-batch"
    real_time = "real-time"


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
def run(
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
    from conveyor.pipeline.spark import start_spark
    spark = start_spark(model, "conveyor-realtime", err_console.status)
    if rebuild_views:
        rebuild(spark, model, chosen)
        say(output, f"rebuilding views {', '.join(chosen)}: checkpoint and Redis data deleted, counting from the "
            "earliest offsets")
    service = RealtimeService(spark, RealtimeConfig(model, chosen, seconds, available_now, metrics_file),
                              partial(_print_realtime_summary, output=output))
    say(output, f"real-time views {', '.join(chosen)}: streaming from {model.pipeline.source}")
    raise typer.Exit(serve(service, endpoint(metrics_host, metrics_port)))

@app.command()
def start(platform: PlatformOption = DEFAULT_PLATFORM, metrics_port: MetricsPortOption = None,
          metrics_file: MetricsFileOption = None) -> None:
    """Start `views run` over every view as a background service of the local platform (stopped by
    `conveyor down`); it resumes from its checkpoint."""
    from conveyor.pipeline.realtime.plan import job_views

    model = platform_from(platform)
    job_views(model, None)  # a platform without views is refused here, not in the service's log
    start_local(model, "views", ["views", "run", "--platform", str(platform.resolve())], metrics_port, metrics_file)


def _moment(text: str) -> datetime:
    for parse in (datetime.fromisoformat, lambda t: datetime.strptime(t, "%Y%m%dT%H%M%SZ")):
        try:
            return parse(text)
        except ValueError:
            continue
    raise typer.BadParameter(f"{text!r} is not a time such as 2025-03-01T12:03 (UTC)", param_hint="--window")


@app.command()
def get(
    view: Annotated[str, typer.Argument(help="A view of pipeline.realtime.views.")],
    key: Annotated[str, typer.Argument(help="The values of the view's key fields, comma-separated, in key order.")],
    window: Annotated[list[str] | None, typer.Option(
        "--window", "-w", help="A time (UTC) inside the window to show (repeatable); default: the latest windows.")] = None,
    last: Annotated[int, typer.Option("--last", "-n", min=1, help="Without --window: how many latest windows.")] = 5,
    platform: PlatformOption = DEFAULT_PLATFORM,
    output: OutputOption = OutputFormat.table,
) -> None:
    """A key's counters per window, with the view's ratios (CTR) computed on read. Windows with no
    data are left out."""
    from conveyor.pipeline.realtime.views import read_view, recent_windows

    model = platform_from(platform)
    windows = [_moment(w) for w in window] if window else recent_windows(model, view, last)
    rows = read_view(model, view, key.split(","), windows)
    if not rows:
        say(output, f"{view} {key}: no counters in the {len(windows)} window(s) asked for")
    counters = sorted({name for row in rows for name in row.counters})
    ratios = sorted({name for row in rows for name in row.ratios})
    columns = (Column("window start (UTC)", cell=lambda row: row.window_start.strftime("%Y-%m-%d %H:%M:%S")),
               *(Column(c, cell=lambda row, c=c: f"{row.counters.get(c, 0):,}", justify="right") for c in counters),
               *(Column(r, cell=lambda row, r=r: "-" if row.ratios.get(r) is None else f"{row.ratios[r]:.2%}",
                        justify="right") for r in ratios))
    if rows or output is OutputFormat.json:
        render(output, Section("windows", f"{view} {key}", columns, rows), view=view, key=key)
