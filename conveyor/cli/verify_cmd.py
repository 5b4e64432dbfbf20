"""``conveyor verify``: the platform's promise, that an event the gateway accepts is counted once in
every sink, checked on a running platform (docs/verify.md). Exit 1 when an invariant fails."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from conveyor.cli.common import (DEFAULT_PLATFORM, OutputFormat, OutputOption, PlatformOption, Section, console,
                                 err_console, platform_from, render, say)
from conveyor.config import Platform
from conveyor.errors import ConveyorError
from conveyor.verify.checks import (TITLES, Invariant, Result, Skipped, Unchecked, Verdict, at_least, exit_status,
                                    failed, parse_accepted, parse_dispatch_group)
from conveyor.verify.errors import VerifyInputError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_STYLE = {Verdict.PASS: "green", Verdict.FAIL: "bold red", Verdict.SKIP: "yellow"}


@contextmanager
def _checking(results: list[Result], invariant: Invariant, subject: str, what: str) -> Iterator[None]:
    """A sink that cannot be read fails its invariant (the promise is not shown to hold); the others
    are still checked."""
    import redis

    try:
        with err_console.status(what):
            yield
    except (ConveyorError, redis.RedisError) as err:
        results.append(Unchecked(invariant, subject, f"{type(err).__name__}: {err}"))


def _read_accepted(path: Path) -> dict[str, set[str]]:
    try:
        with path.open(encoding="utf-8") as lines:
            return parse_accepted(lines, str(path))
    except (OSError, UnicodeDecodeError) as err:
        raise VerifyInputError(f"--accepted {path}: {err}") from None


def _lake(spark: SparkSession, platform: Platform, lake: list[str], accepted: dict[str, set[str]] | None,
          results: list[Result]) -> None:
    from conveyor.verify.gather import lake_once

    for topic in lake:
        with _checking(results, Invariant.lake, topic, f"counting the event ids of {topic}"):
            results.append(lake_once(spark, platform, topic, None if accepted is None else accepted.get(topic, set())))
    if accepted is not None and (elsewhere := sorted(set(accepted) - set(lake))):
        err_console.print(f"note: accepted events of {', '.join(elsewhere)} are not checked: not landed in the lake",
                          highlight=False)


def _audit(spark: SparkSession, platform: Platform, results: list[Result]) -> None:
    from conveyor.verify.gather import audit

    with _checking(results, Invariant.audit, "accepted events", "auditing the lake against the accepted events"):
        results.append(audit(spark, platform))


def _views(platform: Platform, results: list[Result]) -> None:
    from conveyor.pipeline.realtime.store import connect
    from conveyor.verify.gather import rejected, since, view_check, view_topic

    views = platform.pipeline.realtime.views
    if not views:
        results.append(Skipped(Invariant.views, "", "pipeline.realtime.views declares no view"))
        return
    ready = []  # empty when Redis or the rejects could not be read (then recorded as the failure)
    with _checking(results, Invariant.views, "rejects", f"reading {platform.pipeline.realtime.rejects_topic}"):
        ready.append((connect(platform, reader=True), rejected(platform)))
    if not ready:
        return
    (client, rejects), now = ready[0], datetime.now(timezone.utc)
    starts = {name: since(view, now) for name, view in views.items()}
    reads = {}
    for topic in sorted({v.topic for v in views.values()}):
        first = min(starts[name] for name, view in views.items() if view.topic == topic)
        with _checking(results, Invariant.views, topic, f"reading {topic} on the source cluster"):
            reads[topic] = view_topic(platform, topic, first)
    newest = max((r.newest_ms for r in reads.values() if r is not None and r.newest_ms is not None), default=None)
    for name, view in sorted(views.items()):
        if view.topic in reads:
            with _checking(results, Invariant.views, name, f"recounting view {name}"):
                results.append(view_check(client, name, view, reads[view.topic], rejects, starts[name], newest))


def _dispatch(platform: Platform, groups: list[tuple[str, str]], results: list[Result]) -> None:
    from conveyor.verify.gather import dispatch_check

    if not groups:
        results.append(Skipped(Invariant.dispatch, "", "no --dispatch-group given"))
    for topic, group in groups:
        with _checking(results, Invariant.dispatch, f"{topic}:{group}", f"reading the commits of {group}"):
            results.append(dispatch_check(platform, topic, group))


def _show(results: list[Result], output: OutputFormat) -> None:
    if output is OutputFormat.json:
        rows = [{"invariant": r.invariant, "subject": r.subject, "verdict": r.verdict, "summary": r.summary,
                 "checked": r.checked, "problems": list(r.problems), "figures": asdict(r)} for r in results]
        render(output, Section("checks", "", (), rows), passed=not failed(results))
        return
    for r in results:
        subject = f" ({r.subject})" if r.subject else ""
        console.print(f"[{_STYLE[r.verdict]}]{r.verdict.value}[/]  {TITLES[r.invariant]}{subject}: ", end="")
        console.print(r.summary, markup=False, highlight=False)
        for problem in r.problems:
            console.print(f"    {problem}", markup=False, highlight=False)


def verify(
    platform: PlatformOption = DEFAULT_PLATFORM,
    accepted: Annotated[Path | None, typer.Option(
        "--accepted", help="NDJSON of the events clients got 2xx for, one {\"topic\": ..., \"event_id\": ...} a line: "
                           "each lake table must hold exactly these ids.")] = None,
    dispatch_groups: Annotated[list[str] | None, typer.Option(
        "--dispatch-group", help="TOPIC:GROUP of a dispatcher group whose every message must be acked "
                                 "(repeatable).")] = None,
    only: Annotated[list[Invariant] | None, typer.Option(
        "--only", case_sensitive=False, help="Check only these invariants (repeatable; default: all).")] = None,
    min_events: Annotated[int, typer.Option(
        "--min-events", min=0, help="Fail an invariant that checked fewer events than this (an empty sink shows "
                                    "nothing).")] = 0,
    output: OutputOption = OutputFormat.table,
) -> None:
    """Check that every event the gateway accepted is counted once in every sink: the lake's tables
    hold each event id once (and, with --accepted, exactly the accepted ones), the audit finds no
    complete hour with lost or duplicated events, every real-time view equals verify's recount of
    its topic (and each of the job's rejects has the reason it gives), every committed record of each route's source is on its destination (read from both
    sides, with the gaps the route recorded as lost), and the dispatcher groups acked everything.
    One line per invariant and subject, with the events it checked; SKIP where there is nothing
    to check. Exit 1 when any fails, 3 when none failed but one was skipped, 0 when all held. Run
    it once traffic has stopped and the lake, the views and the routes have caught up."""
    from conveyor.pipeline.tables import lake_topics
    from conveyor.verify.gather import copies

    chosen = set(only or Invariant)
    model = platform_from(platform)
    ids = _read_accepted(accepted) if accepted is not None and Invariant.lake in chosen else None
    groups = [parse_dispatch_group(g) for g in dispatch_groups or ()]
    results: list[Result] = []
    spark_checks: list[tuple[Invariant, Callable[[SparkSession, list[str]], None]]] = [
        (Invariant.lake, lambda spark, lake: _lake(spark, model, lake, ids, results)),
        (Invariant.audit, lambda spark, lake: _audit(spark, model, results))]
    if chosen & {invariant for invariant, _ in spark_checks}:
        lake = lake_topics(model)  # refuse a platform without lake topics before Spark starts
        from conveyor.pipeline.spark import start_spark
        spark = start_spark(model, "conveyor-verify", err_console.status)
        for invariant, check in spark_checks:
            if invariant in chosen:
                check(spark, lake)
    if Invariant.views in chosen:
        _views(model, results)
    if Invariant.replication in chosen:
        with _checking(results, Invariant.replication, "", "reading every route's source and destination"):
            results += copies(model)
    if Invariant.dispatch in chosen:
        _dispatch(model, groups, results)
    results = at_least(results, min_events)
    _show(results, output)
    counts = {v: sum(r.verdict is v for r in results) for v in Verdict}
    say(output, f"{counts[Verdict.PASS]} of {len(results)} check(s) passed, {counts[Verdict.SKIP]} skipped, "
                f"{counts[Verdict.FAIL]} failed")
    raise typer.Exit(exit_status(results))
