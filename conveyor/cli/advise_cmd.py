"""``conveyor advise partitions``: partitions per topic from traffic, processing time and wanted lag."""

from __future__ import annotations

from typing import Annotated

import typer
from conveyor.cli.common import (DEFAULT_PLATFORM, Column, OutputFormat, OutputOption, PlatformOption, Section,
                                 err_console, platform_from, render, window_seconds)
from conveyor.config import parse_duration_ms
from conveyor.topics.advise import AdvicePolicy, TopicDemand, Verdict, advise
from conveyor.ops.advise_live import measure

app = typer.Typer(rich_markup_mode="markdown", no_args_is_help=True, help="Advice from measured traffic.")

_COLOURS = {Verdict.ENOUGH: "green", Verdict.ADD_PARTITIONS: "yellow", Verdict.DISPATCHER: "cyan"}
_COLUMNS = (Column("topic"), Column("partitions"), Column("msg/s", cell=lambda r: f"{r['messages_per_s']:,.0f}"),
            Column("ms/msg", cell=lambda r: f"{r['ms_per_message']:g} {r['ms_per_message_source']}"),
            Column("behind", cell=lambda r: f"{r['behind']:,}"), Column("consumers", cell=lambda r: f"{r['consumers']:.1f}"),
            Column("recommended"),
            Column("verdict", cell=lambda r: f"[{_COLOURS[r['verdict']]}]{r['verdict'].value}[/]"),
            Column("why", cell=lambda r: "; ".join(r["why"])))


def _per_topic(values: list[str] | None, option: str) -> tuple[float | None, dict[str, float]]:
    """``["20", "clicks=5"]`` -> (20.0, {"clicks": 5.0}): a default and per-topic values."""
    default, named = None, {}
    for value in values or []:
        topic, _, number = value.rpartition("=")
        try:
            parsed = float(number)
        except ValueError:
            raise typer.BadParameter(f"{value!r}: give a number or TOPIC=NUMBER", param_hint=option) from None
        if topic:
            named[topic] = parsed
        else:
            default = parsed
    return default, named


@app.command()
def partitions(
    platform: PlatformOption = DEFAULT_PLATFORM,
    cluster: Annotated[str | None, typer.Option("--cluster", "-c", envvar="CONVEYOR_CLUSTER",
                                                help="Default: pipeline.source, else the only read cluster.")] = None,
    topic: Annotated[list[str] | None, typer.Option("--topic", "-t", help="Only these topics (repeatable).")] = None,
    max_lag: Annotated[str, typer.Option("--max-lag", help="Wanted maximum consumer lag (30s, 5m).")] = "60s",
    processing_ms: Annotated[list[str] | None, typer.Option(
        "--processing-ms", help="Milliseconds one consumer spends per message: `20` for every topic or "
                                "`clicks=20` (repeatable); default: measured on a group that stays behind.")] = None,
    rate: Annotated[list[str] | None, typer.Option(
        "--rate", help="Messages/s instead of the measured produce rate: `5000` or `clicks=5000`.")] = None,
    ordered: Annotated[list[str] | None, typer.Option(
        "--ordered", help="Topics whose consumers need per-key order (the dispatcher gives none).")] = None,
    stall: Annotated[str, typer.Option("--stall", help="A pause to recover from within the lag (rebalance).")] = "30s",
    budget: Annotated[int, typer.Option("--max-partitions", min=1, help="Partitions per topic worth having.")] = 100,
    sample_seconds: Annotated[float, typer.Option(
        "--sample-seconds", min=1, help="Seconds over which the consumers' progress is measured.")] = 10.0,
    window: Annotated[str, typer.Option(
        "--window", help="The produce rate is the brokers' rate over this last span, from the Prometheus that "
                         "scrapes them (ops.prometheus_url or runtime.prometheus).")] = "5m",
    output: OutputOption = OutputFormat.table,
) -> None:
    """Per topic: the consumers its traffic needs, the partitions to have, and whether the dispatcher
    (many consumers per partition) is the better answer than more partitions."""
    model = platform_from(platform)
    cluster = model.read_cluster(cluster)
    spec = model.cluster(cluster)
    try:
        lag_s, stall_s = parse_duration_ms(max_lag) / 1000, parse_duration_ms(stall) / 1000
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    policy = AdvicePolicy(stall_seconds=stall_s, max_partitions=budget, brokers=spec.brokers)
    default_ms, topic_ms = _per_topic(processing_ms, "--processing-ms")
    default_rate, topic_rate = _per_topic(rate, "--rate")
    with err_console.status(f"measuring {cluster} for {sample_seconds:g} s"):
        measured, no_rate = measure(model, cluster, topic, sample_seconds, window_seconds(window))
    rows = []
    for m in measured:
        ms = topic_ms.get(m.topic, default_ms)
        source = "given"
        if ms is None and m.processing_seconds is not None:
            ms, source = m.processing_seconds * 1000, f"measured ({m.measured_group})"
        messages = topic_rate.get(m.topic, default_rate if default_rate is not None else m.rate)
        if ms is None or messages is None:
            missing = "processing time (pass --processing-ms)" if ms is None else f"produce rate ({no_rate}; pass --rate)"
            err_console.print(f"{m.topic}: skipped, no {missing}")
            continue
        demand = TopicDemand(m.topic, m.partitions, messages, ms / 1000, lag_s, m.backlog, m.topic in (ordered or []))
        advice = advise(demand, policy)
        rows.append({"topic": m.topic, "partitions": m.partitions, "messages_per_s": messages, "ms_per_message": ms,
                     "ms_per_message_source": source, "behind": m.backlog, "consumers": advice.consumers_needed,
                     "recommended": advice.recommended, "verdict": advice.verdict, "why": list(advice.reasons)})
    render(output, Section("topics", f"partitions advice for {cluster} (wanted lag {max_lag})", _COLUMNS, rows),
           cluster=cluster, max_lag_s=lag_s)
