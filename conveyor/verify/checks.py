"""The platform's promise as checks over plain data: what each sink holds against what it must. Pure.

Every result is a frozen dataclass with the figures behind it, a :class:`Verdict`, a one-line
``summary`` and the ``problems`` found (at most :data:`SAMPLE` of each kind). The gatherer
(:mod:`conveyor.verify.gather`) reads the sinks; nothing here does I/O.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, ClassVar, Union

from conveyor.verify.errors import VerifyInputError

if TYPE_CHECKING:
    from conveyor.verify.copies import CopyCheck
    from conveyor.verify.views import ViewCheck
    from conveyor.pipeline.audit import HourAudit

#: Offending ids, hours, keys or partitions named per kind; the counts are always whole.
SAMPLE = 10


class Verdict(str, Enum):
    PASS = "PASS"
    FAIL = "FAIL"
    #: The invariant's inputs are absent (nothing to check): not a failure.
    SKIP = "SKIP"


class Invariant(str, Enum):
    lake = "lake"
    audit = "audit"
    views = "views"
    replication = "replication"
    dispatch = "dispatch"


TITLES = {Invariant.lake: "lake exactly once", Invariant.audit: "audit", Invariant.views: "views equal a recount",
          Invariant.replication: "every source record copied", Invariant.dispatch: "every dispatched message acked"}


def _ids(what: str, ids: Sequence[str], total: int) -> str:
    more = f" and {total - len(ids):,} more" if total > len(ids) else ""
    return f"{what}: {', '.join(ids)}{more}"


@dataclass(frozen=True)
class Skipped:
    """An invariant with nothing to check, and why."""

    invariant: Invariant
    subject: str
    why: str
    verdict = Verdict.SKIP
    problems: ClassVar[tuple[str, ...]] = ()
    checked: ClassVar[int] = 0

    @property
    def summary(self) -> str:
        return self.why


@dataclass(frozen=True)
class Unchecked:
    """An invariant that could not be checked (a sink did not answer): the promise is not shown to hold."""

    invariant: Invariant
    subject: str
    error: str
    verdict = Verdict.FAIL
    problems: ClassVar[tuple[str, ...]] = ()
    checked: ClassVar[int] = 0

    @property
    def summary(self) -> str:
        return f"could not check: {self.error}"


# --- 1. lake exactly once ----------------------------------------------------------------------


def parse_accepted(lines: Iterable[str], source: str) -> dict[str, set[str]]:
    """topic -> the event ids a client got 2xx for, from NDJSON lines ``{"topic": ..., "event_id": ...}``."""
    accepted: dict[str, set[str]] = defaultdict(set)
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise VerifyInputError(f"{source}, line {number}: not JSON ({err.msg})") from None
        if not isinstance(record, dict) or not all(isinstance(record.get(k), str) for k in ("topic", "event_id")):
            raise VerifyInputError(f'{source}, line {number}: want {{"topic": "...", "event_id": "..."}}')
        accepted[record["topic"]].add(record["event_id"])
    return dict(accepted)


@dataclass(frozen=True)
class LakeOnce:
    """A lake table's event ids: each once, and (given the accepted ids) exactly those."""

    topic: str
    rows: int
    distinct: int
    duplicated_ids: tuple[str, ...] = ()
    #: Accepted ids of the topic; None when no accepted file was given.
    accepted: int | None = None
    missing: int = 0
    missing_ids: tuple[str, ...] = ()
    unexpected: int = 0
    unexpected_ids: tuple[str, ...] = ()
    #: The topic's committed records on the source cluster (within its retention); None: not read.
    source: int | None = None
    #: Source records neither landed, quarantined, nor dropped as a copy of a landed event id.
    unlanded: int = 0
    unlanded_at: tuple[str, ...] = ()
    #: Rows at source coordinates within its retention that hold no committed record there.
    foreign: int = 0
    foreign_at: tuple[str, ...] = ()
    invariant = Invariant.lake

    @property
    def subject(self) -> str:
        return self.topic

    @property
    def duplicates(self) -> int:
        return self.rows - self.distinct

    @property
    def verdict(self) -> Verdict:
        bad = self.duplicates or self.missing or self.unexpected or self.unlanded or self.foreign
        return Verdict.FAIL if bad else Verdict.PASS

    @property
    def checked(self) -> int:
        return self.rows if self.source is None else max(self.rows, self.source)

    @property
    def summary(self) -> str:
        line = f"{self.rows:,} rows, {self.distinct:,} distinct event ids, {self.duplicates:,} extra copies"
        if self.source is not None:
            line += (f"; {self.source:,} source records: {self.unlanded:,} not landed, {self.foreign:,} rows of no "
                     "source record")
        if self.accepted is not None:
            line += f"; {self.accepted:,} accepted: {self.missing:,} missing, {self.unexpected:,} unexpected"
        return line

    @property
    def problems(self) -> tuple[str, ...]:
        found = []
        if self.duplicates:
            found.append(_ids("ids landed more than once", self.duplicated_ids, len(self.duplicated_ids)))
        if self.unlanded:
            found.append(_ids("source records not landed", self.unlanded_at, self.unlanded))
        if self.foreign:
            found.append(_ids("rows of no source record", self.foreign_at, self.foreign))
        if self.missing:
            found.append(_ids("accepted, not landed", self.missing_ids, self.missing))
        if self.unexpected:
            found.append(_ids("landed, never accepted", self.unexpected_ids, self.unexpected))
        return tuple(found)


# --- 2. audit ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class AuditCheck:
    """Accepted events (the writable clusters' logs) against the lake: every complete hour the logs
    still hold lost nothing and landed nothing twice."""

    complete: int
    pending: int
    failed: tuple[HourAudit, ...]
    #: Events lost in complete hours of topics delivered at least once: told, not failed.
    lost_at_least_once: int = 0
    #: Events accepted in the complete hours.
    checked: int = 0
    #: Every hour either side knows, with its figures (``conveyor lake audit``'s rows).
    hours: tuple[HourAudit, ...] = ()
    invariant = Invariant.audit
    subject = "accepted events"

    @classmethod
    def of(cls, hours: Sequence[HourAudit]) -> AuditCheck:
        complete = [h for h in hours if h.judged]
        return cls(len(complete), len(hours) - len(complete), tuple(h for h in complete if h.failed),
                   sum(h.lost for h in complete if h.warned), sum(h.produced for h in complete), tuple(hours))

    @property
    def verdict(self) -> Verdict:
        return Verdict.FAIL if self.failed else Verdict.PASS

    @property
    def summary(self) -> str:
        return (f"{self.complete:,} complete hour(s) audited, {len(self.failed):,} failed "
                f"({sum(h.lost for h in self.failed):,} lost, {sum(h.duplicates for h in self.failed):,} "
                f"duplicated); {self.pending:,} hour(s) not complete yet or no longer held by the logs"
                + (f"; {self.lost_at_least_once:,} event(s) of topics delivered at least once lost"
                   if self.lost_at_least_once else ""))

    @property
    def problems(self) -> tuple[str, ...]:
        return tuple(f"{h.topic} {h.hour:%Y-%m-%d %H}:00 UTC: produced {h.produced:,}, landed {h.landed:,}, "
                     f"lost {h.lost:,}, duplicates {h.duplicates:,}" for h in self.failed[:SAMPLE])


# --- 3. views equal a recount: conveyor.verify.views --------------------------------------


# --- 4. every source record copied once: conveyor.verify.copies -----------------------------


# --- 5. every dispatched message acked ---------------------------------------------------------


def parse_dispatch_group(text: str) -> tuple[str, str]:
    """``TOPIC:GROUP`` -> (topic, group)."""
    topic, _, group = text.partition(":")
    if not topic or not group:
        raise VerifyInputError(f"--dispatch-group {text!r}: give TOPIC:GROUP, as clients subscribe")
    return topic, group


@dataclass(frozen=True)
class PartitionBacklog:
    partition: int
    #: The group's committed offset (None: it never committed on this partition).
    committed: int | None
    end: int
    #: Records at or above the committed offset that the group has not acked.
    unacked: int
    first_unacked: int | None


def partition_backlog(partition: int, committed: int | None, end: int, acked: Iterable[int],
                      records: Iterable[int]) -> PartitionBacklog:
    """``records``: the offsets of the records between the committed offset and the end (transaction
    markers hold offsets too, and are nothing to ack); those not in ``acked`` are owed."""
    done = set(acked)
    owed = sorted(o for o in records if o not in done)
    return PartitionBacklog(partition, committed, end, len(owed), owed[0] if owed else None)


@dataclass(frozen=True)
class DispatchCheck:
    """A dispatcher group's commits: every record of its topic acked."""

    topic: str
    group: str
    #: The Kafka group the commits are read from (the group itself, or its position feed).
    kafka_group: str
    partitions: tuple[PartitionBacklog, ...]
    invariant = Invariant.dispatch

    @property
    def subject(self) -> str:
        return f"{self.topic}:{self.group}"

    @property
    def backlog(self) -> int:
        return sum(p.unacked for p in self.partitions)

    @property
    def checked(self) -> int:
        """Offsets the group's commits cover, to each partition's end."""
        return sum(p.end for p in self.partitions)

    @property
    def verdict(self) -> Verdict:
        return Verdict.FAIL if self.backlog else Verdict.PASS

    @property
    def summary(self) -> str:
        behind = sum(1 for p in self.partitions if p.unacked)
        return (f"{len(self.partitions):,} partition(s) of {self.kafka_group}, {self.backlog:,} record(s) not acked "
                f"on {behind:,}")

    @property
    def problems(self) -> tuple[str, ...]:
        return tuple(f"partition {p.partition}: committed {'none' if p.committed is None else f'{p.committed:,}'}, "
                     f"end {p.end:,}, {p.unacked:,} not acked from offset {p.first_unacked:,}"
                     for p in self.partitions if p.unacked and p.first_unacked is not None)[:SAMPLE]


@dataclass(frozen=True)
class TooFew:
    """An invariant that held over fewer events than ``--min-events`` asks: too little to show it."""

    of: Any
    minimum: int
    verdict = Verdict.FAIL
    problems: ClassVar[tuple[str, ...]] = ()

    @property
    def invariant(self) -> Invariant:
        return self.of.invariant

    @property
    def subject(self) -> str:
        return self.of.subject

    @property
    def checked(self) -> int:
        return self.of.checked

    @property
    def summary(self) -> str:
        return f"checked {self.checked:,} event(s), fewer than --min-events {self.minimum:,}: {self.of.summary}"


def at_least(results: Iterable[Result], minimum: int) -> list[Result]:
    """Each result that checked fewer than ``minimum`` events failed; skips stay skips."""
    return [TooFew(r, minimum) if r.verdict is not Verdict.SKIP and r.checked < minimum else r for r in results]


def exit_status(results: Iterable[Result]) -> int:
    """0: every invariant held; 1: one failed or could not be read; 3: none failed, but one had
    nothing to check (a skip is never a pass)."""
    verdicts = {r.verdict for r in results}
    return 1 if Verdict.FAIL in verdicts else 3 if Verdict.SKIP in verdicts or not verdicts else 0


#: CopyCheck and ViewCheck live in conveyor.verify.copies and .views, which build on this module.
Result = Union[Skipped, Unchecked, TooFew, LakeOnce, AuditCheck, "ViewCheck", "CopyCheck", DispatchCheck]


def failed(results: Iterable[Result]) -> bool:
    return any(r.verdict is Verdict.FAIL for r in results)
