"""``conveyor balance plan|execute|add-broker``: even out replicas, leaders and traffic per broker."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Annotated

import typer
from rich.filesize import decimal
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from conveyor.cli.common import (
    DEFAULT_PLATFORM,
    PlatformOption,
    YesOption,
    confirm,
    console,
    err_console,
    platform_from,
)
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
SampleOption = Annotated[float, typer.Option(
    "--sample-seconds", envvar="CONVEYOR_BALANCE_SAMPLE_SECONDS", min=0,
    help="Seconds between the two scrapes of the brokers' metrics that measure traffic; 0: counts only.")]
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


def print_plan(live: LiveCluster, result: Plan) -> None:
    for note in live.notes:
        err_console.print(f"[yellow]note:[/] {note}", highlight=False)
    tags = {b.id: ",".join(sorted(b.tags)) for b in live.model.brokers}
    table = Table(title=f"cluster {live.cluster}: load per broker, before -> after")
    for column in ("broker", "rack", "tags", "replicas", "leaders", "bytes in", "bytes out", "disk"):
        table.add_column(column, justify="right" if column not in ("rack", "tags") else "left")
    after = {row.broker: row for row in result.after}
    for row in result.before:
        new = after.get(row.broker)
        name = f"{row.broker}" + ("" if row.live else " (dead)")
        table.add_row(name, row.rack or "", tags.get(row.broker, ""),
                      f"{row.replicas} -> {new.replicas if new else 0}", f"{row.leaders} -> {new.leaders if new else 0}",
                      f"{_rate(row.bytes_in)} -> {_rate(new.bytes_in if new else 0)}",
                      f"{_rate(row.bytes_out)} -> {_rate(new.bytes_out if new else 0)}",
                      f"{decimal(row.disk)} -> {decimal(new.disk if new else 0)}")
    console.print(table)
    if result.changes:
        moves = Table(title=f"partition changes (first {min(len(result.changes), _SHOWN)} of {len(result.changes)}; "
                            "--json for Kafka's full reassignment file)")
        for column in ("partition", "replicas before", "replicas after", "leader", "bytes to copy"):
            moves.add_column(column)
        for change in result.changes[:_SHOWN]:
            moves.add_row(f"{change.topic}-{change.partition}", str(list(change.replicas_before)),
                          str(list(change.replicas_after)), f"{change.leader_before} -> {change.preferred_leader}",
                          decimal(change.bytes_to_move))
        console.print(moves)
    summary = Table(title="max / mean per broker")
    for column in ("load", "before", "after"):
        summary.add_column(column)
    for name in LOADS:
        summary.add_row(name, f"{result.stats_before[name].max_over_mean:.2f}",
                        f"{result.stats_after[name].max_over_mean:.2f}")
    console.print(summary)
    console.print(f"{len(result.changes)} partition(s) change, {len(result.moves)} replica move(s), "
                  f"[bold]{decimal(result.bytes_to_move)}[/] to copy, {len(result.elections)} leader change(s)")


def _plan(platform: Platform, cluster: str, topics: list[str] | None, sample_seconds: float,
          threshold: float) -> tuple[LiveCluster, Plan]:
    with console.status(f"reading cluster {cluster} and measuring traffic for {sample_seconds:g} s"):
        live = live_cluster(platform, cluster, topics, sample_seconds)
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


def _print_batches(execution: Execution) -> None:
    throttle = "unthrottled" if execution.throttle is None else f"throttle {_rate(execution.throttle)}"
    table = Table(title=f"{len(execution.batches)} batch(es), {throttle}")
    for column in ("batch", "partitions", "bytes", "moves"):
        table.add_column(column)
    for i, batch in enumerate(execution.batches):
        moves = ", ".join(f"{t}-{p} {list(execution.before[(t, p)])}->{list(execution.target[(t, p)])}"
                          for t, p in batch[:3])
        table.add_row(str(i + 1), str(len(batch)), decimal(execution.batch_bytes(i)),
                      moves + (f" (+{len(batch) - 3} more)" if len(batch) > 3 else ""))
    console.print(table)


def run_execution(platform: Platform, execution: Execution, dry_run: bool) -> None:
    """Show the batches, then (unless ``dry_run``) apply them with a progress bar."""
    _print_batches(execution)
    if dry_run:
        console.print("dry run: nothing changed")
        return
    executor = Executor(platform, execution.cluster)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as bar:
        done = executor.run(execution, _RichProgress(bar))
    console.print(f"[green]done[/]: {len(done.target)} partition(s) moved in {len(done.batches)} batch(es), "
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
    sample_seconds: SampleOption = 5.0,
    threshold: ThresholdOption = THRESHOLD,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Save the plan for `balance execute --plan`.")] = None,
    reassignment_json: Annotated[bool, typer.Option(
        "--json", help="Also print Kafka's reassignment JSON (kafka-reassign-partitions --execute input).")] = False,
) -> None:
    """Plan moves and leader changes; print the load per broker before and after and the bytes to copy.
    A hard goal that cannot be met (racks, isolation tags, live brokers) fails with the goal and the
    brokers that block it."""
    model = platform_from(platform)
    name = _cluster(model, cluster)
    live, result = _plan(model, name, topic, sample_seconds, threshold)
    print_plan(live, result)
    if reassignment_json:
        console.print_json(result.to_reassignment_json())
    if out is not None:
        saved = _execution(live, result, "none", 10, None)
        out.write_text(saved.to_json())
        console.print(f"plan saved to {out} (made for cluster state {saved.fingerprint})")


@app.command()
def execute(
    platform: PlatformOption = DEFAULT_PLATFORM,
    cluster: ClusterOption = None,
    plan_file: Annotated[Path | None, typer.Option("--plan", help="A plan saved by `balance plan --out`.")] = None,
    topic: TopicOption = None,
    sample_seconds: SampleOption = 5.0,
    threshold: ThresholdOption = THRESHOLD,
    throttle: ThrottleOption = "10MiB",
    batch_partitions: BatchOption = 10,
    batch_bytes: BatchBytesOption = None,
    dry_run: DryRunOption = False,
    discard: Annotated[bool, typer.Option("--discard", help="Drop an unfinished execution instead of resuming.")] = False,
    yes: YesOption = False,
) -> None:
    """Apply a plan in throttled batches, wait for every moved replica to be in sync, then elect the
    preferred leaders. Resumes an interrupted run; refuses a plan made for a cluster that has changed since."""
    model = platform_from(platform)
    name = _cluster(model, cluster)
    execution = None if dry_run else _resumable(model, name, discard)
    if execution is None and plan_file is not None:
        execution = Execution.from_json(plan_file.read_text()).rebatched(_throttle(throttle), batch_partitions,
                                                                         _batch_limit(batch_bytes))
        if execution.cluster != name:
            raise BalanceError(f"{plan_file} is a plan for cluster {execution.cluster}, not {name}")
    if execution is None:
        live, result = _plan(model, name, topic, sample_seconds, threshold)
        print_plan(live, result)
        execution = _execution(live, result, throttle, batch_partitions, batch_bytes)
    if not execution.target and not execution.elections:
        console.print("the cluster is balanced: nothing to do")
        return
    if not dry_run:
        confirm(name, f"move replicas and leaders on cluster {name}", yes)
    run_execution(model, execution, dry_run)


@app.command("add-broker")
def add_broker(
    broker: Annotated[list[int], typer.Option("--broker", "-b", help="The new broker's id (repeatable).")],
    platform: PlatformOption = DEFAULT_PLATFORM,
    cluster: ClusterOption = None,
    topic: TopicOption = None,
    sample_seconds: SampleOption = 5.0,
    threshold: ThresholdOption = THRESHOLD,
    throttle: ThrottleOption = "10MiB",
    batch_partitions: BatchOption = 5,
    batch_bytes: BatchBytesOption = None,
    dry_run: DryRunOption = False,
    yes: YesOption = False,
) -> None:
    """Move load onto newly started brokers in throttled batches (smooth scale-out). The brokers
    must already run and have registered with the cluster. An interrupted run resumes first."""
    model = platform_from(platform)
    name = _cluster(model, cluster)
    unfinished = None if dry_run else _resumable(model, name, discard=False)
    if unfinished is not None:  # an interrupted add-broker (or execute) finishes first
        confirm(name, f"resume the unfinished moves on cluster {name}", yes)
        run_execution(model, unfinished, dry_run)
        return
    live, result = _plan(model, name, topic, sample_seconds, threshold)
    missing = sorted(set(broker) - set(live.metadata.brokers))
    if missing:
        raise BalanceError(f"broker(s) {missing} are not live in cluster {name} (live: {sorted(live.metadata.brokers)});"
                           " start them first (locally: raise the cluster's `brokers` in platform.yaml and run "
                           "`conveyor up`)")
    print_plan(live, result)
    onto = sum(1 for m in result.moves if m.destination in broker)
    console.print(f"{onto} of {len(result.moves)} replica move(s) go to broker(s) {sorted(broker)}")
    if result.is_empty:
        console.print("nothing to move: the cluster is balanced with the new broker(s) as it is")
        return
    if not dry_run:
        confirm(name, f"move replicas onto broker(s) {sorted(broker)} of cluster {name}", yes)
    run_execution(model, _execution(live, result, throttle, batch_partitions, batch_bytes), dry_run)
