"""``conveyor balance plan|execute|add-broker``: even out replicas, leaders and traffic per broker."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.filesize import decimal
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from conveyor.cli.common import (DEFAULT_PLATFORM, Column, OutputFormat, OutputOption, PlatformOption, Report, Section,
                                 YesOption, confirm, console, err_console, platform_from,
                                 window_seconds)
from conveyor.config import Platform, parse_size_bytes
from conveyor.ops.balance import Plan, plan
from conveyor.ops.balance.errors import BalanceError
from conveyor.ops.balance.execution import Execution, new_execution
from conveyor.ops.balance.executor import Executor, load_state, state_path
from conveyor.ops.balance.goals import THRESHOLD
from conveyor.ops.balance.live import LiveCluster, live_cluster
from conveyor.ops.balance.planner import LOADS, default_goals

app = typer.Typer(rich_markup_mode="markdown", no_args_is_help=True,
                  help="Balance replicas, leaders and bytes in/out across a cluster's brokers (Cruise Control's "
                       "goals: racks and isolation tags first).")

ClusterOption = Annotated[str | None, typer.Option(
    "--cluster", "-c", envvar="CONVEYOR_CLUSTER", help="Cluster to balance (default: the only read cluster).")]
TopicOption = Annotated[list[str] | None, typer.Option(
    "--topic", "-t", help="Only these topics (repeatable); default: every topic, Kafka's own included.")]
WindowOption = Annotated[str, typer.Option(
    "--window", envvar="CONVEYOR_BALANCE_WINDOW",
    help="Traffic is the brokers' byte rates over this last span, as the Prometheus that scrapes them holds them "
         "(ops.prometheus_url or runtime.prometheus): 30s, 5m, 1h; 0: balance replica and leader counts only.")]
ThresholdOption = Annotated[float, typer.Option("--threshold", min=1.0, help="Target max/mean per broker.")]
ThrottleOption = Annotated[str, typer.Option(
    "--throttle", envvar="CONVEYOR_BALANCE_THROTTLE",
    help="Replication throttle while replicas move (bytes/s: 10MiB, 50MB); `none` for no throttle.")]
BatchOption = Annotated[int, typer.Option("--batch-partitions", min=1, help="Partitions moved per batch.")]
BatchBytesOption = Annotated[str | None, typer.Option("--batch-bytes", help="Most bytes copied per batch (e.g. 1GiB).")]
DryRunOption = Annotated[bool, typer.Option("--dry-run", help="Show the batches; change nothing.")]


#: Partition changes listed by `balance plan`; the rest are in the --json output.
_SHOWN = 30


def _cluster(platform: Platform, cluster: str | None) -> str:
    return platform.read_cluster(cluster)


def _rate(value: float) -> str:
    return f"{decimal(int(value))}/s"


def _before_after(key: str, show: Callable[[Any], str] = str) -> Column:
    return Column(key.replace("_", " "), justify="right",
                  cell=lambda row: f"{show(row['before'][key])} -> {show(row['after'][key])}")


_BROKER_COLUMNS = (
    Column("broker", justify="right", cell=lambda row: f"{row['broker']}" + ("" if row["live"] else " (dead)")),
    Column("rack"), Column("tags", cell=lambda row: ",".join(row["tags"])),
    _before_after("replicas"), _before_after("leaders"), _before_after("bytes_in", _rate),
    _before_after("bytes_out", _rate), _before_after("disk", decimal))
_CHANGE_COLUMNS = (
    Column("partition", cell=lambda c: f"{c.topic}-{c.partition}"),
    Column("replicas before", cell=lambda c: str(list(c.replicas_before))),
    Column("replicas after", cell=lambda c: str(list(c.replicas_after))),
    Column("leader", cell=lambda c: f"{c.leader_before} -> {c.preferred_leader}"),
    Column("bytes to copy", cell=lambda c: decimal(c.bytes_to_move)))
_LOAD_COLUMNS = (Column("load"), Column("before", cell=lambda r: f"{r['before']:.2f}"),
                 Column("after", cell=lambda r: f"{r['after']:.2f}"))


def _broker_rows(live: LiveCluster, result: Plan) -> list[dict[str, Any]]:
    tags = {b.id: sorted(b.tags) for b in live.model.brokers}
    after = {row.broker: row for row in result.after}
    loads = ("replicas", "leaders", "bytes_in", "bytes_out", "disk")
    return [{"broker": row.broker, "rack": row.rack, "live": row.live, "tags": tags.get(row.broker, []),
             "before": {k: getattr(row, k) for k in loads},
             "after": {k: getattr(after[row.broker], k) if row.broker in after else 0 for k in loads}}
            for row in result.before]


def print_plan(report: Report, live: LiveCluster, result: Plan) -> None:
    for note in live.notes:
        err_console.print(f"[yellow]note:[/] {note}", highlight=False)
    # People see the first changes; a script gets them all.
    shown = result.changes if report.output is OutputFormat.json else result.changes[:_SHOWN]
    sections = [Section("brokers", f"cluster {live.cluster}: load per broker, before -> after", _BROKER_COLUMNS,
                        _broker_rows(live, result))]
    if shown or report.output is OutputFormat.json:
        sections.append(Section("changes", f"partition changes (first {len(shown)} of {len(result.changes)}; "
                                "--json for Kafka's full reassignment file)", _CHANGE_COLUMNS, shown))
    sections.append(Section("max_over_mean", "max / mean per broker", _LOAD_COLUMNS,
                            [{"load": name, "before": result.stats_before[name].max_over_mean,
                              "after": result.stats_after[name].max_over_mean} for name in LOADS]))
    report.add(*sections, cluster=live.cluster, replica_moves=len(result.moves), bytes_to_move=result.bytes_to_move,
               leader_changes=len(result.elections))
    report.say(f"{len(result.changes)} partition(s) change, {len(result.moves)} replica move(s), "
               f"[bold]{decimal(result.bytes_to_move)}[/] to copy, {len(result.elections)} leader change(s)")


def _plan(platform: Platform, cluster: str, topics: list[str] | None, window_seconds: float,
          threshold: float) -> tuple[LiveCluster, Plan]:
    with err_console.status(f"reading cluster {cluster} and its traffic over the last {window_seconds:g} s"):
        live = live_cluster(platform, cluster, topics, window_seconds)
        return live, plan(live.model, default_goals(threshold))


def _throttle(text: str) -> int | None:
    if text.strip().lower() in ("none", "off", "-1"):
        return None
    try:
        return parse_size_bytes(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--throttle") from None


def _batch_limit(batch_bytes: str | None) -> int | None:
    return parse_size_bytes(batch_bytes) if batch_bytes else None


def _execution(live: LiveCluster, result: Plan, throttle: str, batch_partitions: int,
               batch_bytes: str | None) -> Execution:
    limit = _batch_limit(batch_bytes)
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    return new_execution(live.cluster, result, live.assignment(), now, _throttle(throttle), batch_partitions, limit)


class _RichProgress:
    def __init__(self, progress: Progress) -> None:
        self.progress, self.task = progress, None

    def batch(self, index: int, total: int, partitions: int, bytes_to_move: int) -> None:
        if self.task is not None:
            self.progress.update(self.task, completed=self.progress.tasks[self.task].total)
        self.task = self.progress.add_task(f"batch {index + 1}/{total} ({decimal(bytes_to_move)})", total=partitions)

    def moved(self, index: int, partitions_done: int) -> None:
        if self.task is not None:
            self.progress.update(self.task, completed=partitions_done)

    def note(self, message: str) -> None:
        self.progress.console.print(message)


def _batch_rows(execution: Execution) -> list[dict[str, Any]]:
    return [{"batch": i + 1, "partitions": len(batch), "bytes": execution.batch_bytes(i),
             "moves": [{"topic": t, "partition": p, "replicas_before": list(execution.before[(t, p)]),
                        "replicas_after": list(execution.target[(t, p)])} for t, p in batch]}
            for i, batch in enumerate(execution.batches)]


def _moves(row: dict[str, Any]) -> str:
    moves = row["moves"]
    shown = ", ".join(f"{m['topic']}-{m['partition']} {m['replicas_before']}->{m['replicas_after']}" for m in moves[:3])
    return shown + (f" (+{len(moves) - 3} more)" if len(moves) > 3 else "")


_BATCH_COLUMNS = (Column("batch"), Column("partitions"), Column("bytes", cell=lambda r: decimal(r["bytes"])),
                  Column("moves", cell=_moves))


def run_execution(report: Report, platform: Platform, execution: Execution, dry_run: bool) -> None:
    """Show the batches, then (unless ``dry_run``) apply them with a progress bar."""
    throttle = "unthrottled" if execution.throttle is None else f"throttle {_rate(execution.throttle)}"
    report.add(Section("batches", f"{len(execution.batches)} batch(es), {throttle}", _BATCH_COLUMNS,
                       _batch_rows(execution)), throttle=execution.throttle, dry_run=dry_run)
    if dry_run:
        report.say("dry run: nothing changed")
        return
    executor = Executor(platform, execution.cluster)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console if report.output is OutputFormat.table else err_console) as bar:
        done = executor.run(execution, _RichProgress(bar))
    report.values.update(state_file=executor.state_file)
    report.say(f"[green]done[/]: {len(done.target)} partition(s) moved in {len(done.batches)} batch(es), "
               f"preferred leaders elected; state in {executor.state_file}")


def _resumable(platform: Platform, cluster: str, discard: bool) -> Execution | None:
    path = state_path(platform, cluster)
    state = load_state(path)
    if state is None or state.finished:
        return None
    if discard:
        path.unlink()
        err_console.print(f"discarded the unfinished execution in {path}")
        return None
    err_console.print(f"resuming the unfinished execution of {state.created_at} (batch {state.done + 1} of "
                      f"{len(state.batches)}); --discard to drop it")
    return state


@app.command("plan")
def plan_command(
    platform: PlatformOption = DEFAULT_PLATFORM,
    cluster: ClusterOption = None,
    topic: TopicOption = None,
    window: WindowOption = "5m",
    threshold: ThresholdOption = THRESHOLD,
    out: Annotated[Path | None, typer.Option("--out", help="Save the plan for `balance execute --plan`.")] = None,
    reassignment_json: Annotated[bool, typer.Option(
        "--json", help="Also print Kafka's reassignment JSON (kafka-reassign-partitions --execute input).")] = False,
    output: OutputOption = OutputFormat.table,
) -> None:
    """Plan moves and leader changes; print the load per broker before and after and the bytes to copy.
    A hard goal that cannot be met (racks, isolation tags, live brokers) fails with the goal and the
    brokers that block it."""
    model = platform_from(platform)
    name = _cluster(model, cluster)
    live, result = _plan(model, name, topic, window_seconds(window), threshold)
    report = Report(output)
    print_plan(report, live, result)
    if reassignment_json:
        if output is OutputFormat.json:
            report.values["reassignment"] = json.loads(result.to_reassignment_json())
        else:
            console.print_json(result.to_reassignment_json())
    if out is not None:
        saved = _execution(live, result, "none", 10, None)
        out.write_text(saved.to_json())
        report.values["saved"] = out
        report.say(f"plan saved to {out} (made for cluster state {saved.fingerprint})")
    report.close()


@app.command()
def execute(
    platform: PlatformOption = DEFAULT_PLATFORM,
    cluster: ClusterOption = None,
    plan_file: Annotated[Path | None, typer.Option("--plan", help="A plan saved by `balance plan --out`.")] = None,
    topic: TopicOption = None,
    window: WindowOption = "5m",
    threshold: ThresholdOption = THRESHOLD,
    throttle: ThrottleOption = "10MiB",
    batch_partitions: BatchOption = 10,
    batch_bytes: BatchBytesOption = None,
    dry_run: DryRunOption = False,
    discard: Annotated[bool, typer.Option("--discard", help="Drop an unfinished execution instead of resuming.")] = False,
    yes: YesOption = False,
    output: OutputOption = OutputFormat.table,
) -> None:
    """Apply a plan in throttled batches, wait for every moved replica to be in sync, then elect the
    preferred leaders. Resumes an interrupted run; refuses a plan made for a cluster that has changed since."""
    model = platform_from(platform)
    name = _cluster(model, cluster)
    report = Report(output)
    execution = None if dry_run else _resumable(model, name, discard)
    if execution is None and plan_file is not None:
        execution = Execution.from_json(plan_file.read_text()).rebatched(_throttle(throttle), batch_partitions,
                                                                         _batch_limit(batch_bytes))
        if execution.cluster != name:
            raise BalanceError(f"{plan_file} is a plan for cluster {execution.cluster}, not {name}")
    if execution is None:
        live, result = _plan(model, name, topic, window_seconds(window), threshold)
        print_plan(report, live, result)
        execution = _execution(live, result, throttle, batch_partitions, batch_bytes)
    if not execution.target and not execution.elections:
        report.say("the cluster is balanced: nothing to do")
    else:
        if not dry_run:
            confirm(name, f"move replicas and leaders on cluster {name}", yes)
        run_execution(report, model, execution, dry_run)
    report.close()


@app.command("add-broker")
def add_broker(
    broker: Annotated[list[int], typer.Option("--broker", "-b", help="The new broker's id (repeatable).")],
    platform: PlatformOption = DEFAULT_PLATFORM,
    cluster: ClusterOption = None,
    topic: TopicOption = None,
    window: WindowOption = "5m",
    threshold: ThresholdOption = THRESHOLD,
    throttle: ThrottleOption = "10MiB",
    batch_partitions: BatchOption = 5,
    batch_bytes: BatchBytesOption = None,
    dry_run: DryRunOption = False,
    yes: YesOption = False,
    output: OutputOption = OutputFormat.table,
) -> None:
    """Move load onto newly started brokers in throttled batches (smooth scale-out). The brokers
    must already run and have registered with the cluster. An interrupted run resumes first."""
    model = platform_from(platform)
    name = _cluster(model, cluster)
    report = Report(output)
    unfinished = None if dry_run else _resumable(model, name, discard=False)
    if unfinished is not None:  # an interrupted add-broker (or execute) finishes first
        confirm(name, f"resume the unfinished moves on cluster {name}", yes)
        run_execution(report, model, unfinished, dry_run)
        report.close()
        return
    live, result = _plan(model, name, topic, window_seconds(window), threshold)
    missing = sorted(set(broker) - set(live.metadata.brokers))
    if missing:
        raise BalanceError(f"broker(s) {missing} are not live in cluster {name} (live: {sorted(live.metadata.brokers)});"
                           " start them first (locally: raise the cluster's `brokers` in platform.yaml and run "
                           "`conveyor up`)")
    print_plan(report, live, result)
    onto = sum(1 for m in result.moves if m.destination in broker)
    report.values["moves_onto_new_brokers"] = onto
    report.say(f"{onto} of {len(result.moves)} replica move(s) go to broker(s) {sorted(broker)}")
    if result.is_empty:
        report.say("nothing to move: the cluster is balanced with the new broker(s) as it is")
    else:
        if not dry_run:
            confirm(name, f"move replicas onto broker(s) {sorted(broker)} of cluster {name}", yes)
        run_execution(report, model, _execution(live, result, throttle, batch_partitions, batch_bytes), dry_run)
    report.close()
