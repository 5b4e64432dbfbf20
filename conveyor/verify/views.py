"""verify's own recount of a real-time view from its Kafka topic, its judgement of each reject, and
the view's counters in Redis against the recount. Pure.

Written apart from the views job (conveyor.pipeline.realtime) on purpose: a recount made with the
job's own plan code would pass a bug the two share. Here a record is read as JSON, checked with the
topic's contract as the gateway checks it, and counted by the view's declaration in platform.yaml
(filter, group-by fields, window, metrics). Copies of one ``event_id`` count once.

The job's side output names every event it left out. A reject is accepted only when the record
itself shows its reason:

- ``malformed``: the value is not a JSON object, or the contract refuses it;
- ``future``: its ``event_time`` is more than the future tolerance after its Kafka timestamp;
- ``incomplete``: a group-by field of the view is missing;
- ``late``: its ``event_time`` is before the newest event time of the views' topics less the view's
  allowed lateness. The job's watermark for a batch is the newest time it had seen before it (in
  any topic of its views), less the lateness, so it is never above that bound: an event at or after
  it cannot have been late.

Any other reject is unjustified: the event is counted here as the job should have counted it, and
the check names the record.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import re

import orjson

from conveyor.config import RealtimeView
from conveyor.pipeline.records import FRAME, FRAMED
from conveyor.topics.contracts import Contract
from conveyor.verify.checks import SAMPLE, Invariant, Verdict

#: A view key's window start: basic ISO 8601 in UTC, as platform.yaml's ``{window_start}`` documents it.
LABEL_FORMAT = "%Y%m%dT%H%M%SZ"
#: A Redis counter's bounds (a signed 64-bit integer): a view's counters stop there.
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class SourceRecord:
    partition: int
    offset: int
    timestamp_ms: int
    value: bytes | None


@dataclass(frozen=True)
class Event:
    partition: int
    offset: int
    event_ms: int
    fields: Mapping[str, Any]
    #: Where the other copies of the same event_id sit (partition, offset).
    copies: tuple[tuple[int, int], ...] = ()

    @property
    def coordinates(self) -> tuple[tuple[int, int], ...]:
        return ((self.partition, self.offset), *self.copies)


@dataclass(frozen=True)
class TopicRead:
    """A topic's records as verify reads them: the events (one per event_id), and the coordinates
    of those that are not events (malformed, or from the future)."""

    events: tuple[Event, ...]
    malformed: frozenset[tuple[int, int]]
    future: frozenset[tuple[int, int]]
    #: The newest event time of the valid, present events (epoch ms); None without any.
    newest_ms: int | None


def _event_ms(value: Any) -> int | None:
    """An RFC 3339 time as exact epoch milliseconds (a float timestamp may round a millisecond off)."""
    try:
        moment = datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        return None
    if moment is None or moment.tzinfo is None:
        return None
    return (moment - _EPOCH) // timedelta(milliseconds=1)


def json_value(value: bytes | None) -> Any:
    """A record's value as JSON, a registry id's framing left out; None when it is not JSON."""
    try:
        return orjson.loads((value[FRAME:] if value and value.startswith(FRAMED) else value) or b"")
    except orjson.JSONDecodeError:
        return None


def parse(value: bytes | None, contract: Contract) -> tuple[dict[str, Any] | None, int | None]:
    """The event and its time (epoch ms), or (None, None) where the record is no event of the contract."""
    event = json_value(value)
    if not isinstance(event, dict) or contract.check(event) is not None:
        return None, None
    event_ms = _event_ms(event.get("event_time"))
    return (event, event_ms) if event_ms is not None else (None, None)


def read_topic(records: Iterable[SourceRecord], contract: Contract, future_tolerance_ms: int) -> TopicRead:
    """The topic's events, one per event_id (the first in partition and offset order holds the others)."""
    first: dict[str, int] = {}
    kept: list[tuple[SourceRecord, dict[str, Any], int]] = []
    copies: dict[int, list[tuple[int, int]]] = defaultdict(list)
    malformed, future, newest = set(), set(), None
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        event, event_ms = parse(record.value, contract)
        if event is None or event_ms is None:
            malformed.add((record.partition, record.offset))
            continue
        if event_ms > record.timestamp_ms + future_tolerance_ms:
            future.add((record.partition, record.offset))
            continue
        newest = event_ms if newest is None else max(newest, event_ms)
        event_id = event.get("event_id")
        if isinstance(event_id, str) and event_id in first:
            copies[first[event_id]].append((record.partition, record.offset))
            continue
        if isinstance(event_id, str):
            first[event_id] = len(kept)
        kept.append((record, event, event_ms))
    events = tuple(Event(r.partition, r.offset, event_ms, event, tuple(copies.get(i, ())))
                   for i, (r, event, event_ms) in enumerate(kept))
    return TopicRead(events, frozenset(malformed), frozenset(future), newest)


def _selects(match: Mapping[str, str | list[str]], event: Mapping[str, Any]) -> bool:
    """A filter or a metric's ``where``: every named field present with one of the values, as text."""
    for name, wanted in match.items():
        allowed = {wanted} if isinstance(wanted, str) else set(wanted)
        if event.get(name) is None or str(event[name]) not in allowed:
            return False
    return True


def _label(start_ms: int) -> str:
    return datetime.fromtimestamp(start_ms / 1000, timezone.utc).strftime(LABEL_FORMAT)


@dataclass(frozen=True)
class Recount:
    #: Redis key -> hash field -> what the view must hold.
    counters: dict[str, dict[str, int]]
    #: Events of the compared windows read for the view, those rightly rejected included.
    checked: int
    #: Events left out because the job rejected them for a reason the record shows.
    rejected: int
    #: "topic[p]@o: kind (why it does not hold)" for each reject the record does not bear out.
    unjustified: tuple[str, ...] = field(default=())


def _why_not(kind: str, view: RealtimeView, event: Event, newest_ms: int | None) -> str | None:
    """None when the reject of ``kind`` holds for ``event`` (a valid, present event), else why not."""
    if kind == "incomplete":
        missing = [g for g in view.group_by if event.fields.get(g) is None]
        return None if missing else "every group-by field is present"
    if kind == "late":
        bound = None if newest_ms is None else newest_ms - round(view.allowed_lateness * 1000)
        if bound is not None and event.event_ms < bound:
            return None
        return (f"event_time {_iso(event.event_ms)} is within {view.allowed_lateness:g}s of the views' newest event "
                f"time {_iso(newest_ms)}")
    return "the record is a valid event of its contract, on time"


def _iso(ms: int | None) -> str:
    return "none" if ms is None else datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat()


def recount(name: str, view: RealtimeView, read: TopicRead, rejects: Mapping[tuple[int, int], str],
            since_ms: int, newest_ms: int | None = None) -> Recount:
    """What view ``name`` must hold in its windows from ``since_ms`` on. ``rejects``: the kind of
    each of the topic's records the job rejected for this view (or for every view of the topic);
    ``newest_ms``: the newest event time of every views' topic (default: of this one)."""
    newest_ms = read.newest_ms if newest_ms is None else newest_ms
    window_ms = round(view.window * 1000)
    in_key = set(view.key_fields)
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    checked = rejected = 0
    unjustified: list[str] = []
    for coordinates in sorted((read.malformed | read.future) & set(rejects)):
        shown = "malformed" if coordinates in read.malformed else "future"
        if rejects[coordinates] != shown:
            unjustified.append(f"{view.topic}[{coordinates[0]}]@{coordinates[1]}: {rejects[coordinates]} "
                               f"(the record is {shown})")
    for event in read.events:
        start = event.event_ms - event.event_ms % window_ms
        if start < since_ms or not _selects(view.filter, event.fields):
            continue
        checked += 1
        kind = next((rejects[c] for c in event.coordinates if c in rejects), None)
        if kind is not None:
            why_not = _why_not(kind, view, event, newest_ms)
            if why_not is None:
                rejected += 1
                continue
            unjustified.append(f"{view.topic}[{event.partition}]@{event.offset}: {kind} ({why_not})")
        if any(event.fields.get(g) is None for g in view.group_by):
            continue  # the job must reject it as incomplete; whether it did is not the counters' business
        values = {**event.fields, "view": name, "window_start": _label(start)}
        key = view.key_layout.format_map(values)
        for metric_name, metric in view.metrics.items():
            if not _selects(metric.where, event.fields):
                continue
            hash_field = ":".join([metric_name, *(str(event.fields[g]) for g in view.group_by if g not in in_key)])
            counts[key][hash_field] += 1 if metric.sum is None else (event.fields.get(metric.sum) or 0)
    bounded = {key: {f: min(max(v, _INT64_MIN), _INT64_MAX) for f, v in fields.items()} for key, fields in counts.items()}
    return Recount(bounded, checked, rejected, tuple(unjustified))


def key_pattern(view: str, layout: str) -> str:
    """A Redis SCAN pattern matching every key of the view (glob characters of the layout escaped)."""
    parts = re.split(r"\{(\w+)\}", layout)
    return "".join(re.sub(r"([*?\[\]\\])", r"\\\1", part) if i % 2 == 0 else view if part == "view" else "*"
                   for i, part in enumerate(parts))


def window_pattern(view: str, layout: str) -> re.Pattern[str]:
    """Matches the view's keys, capturing the window start (the layout's other parts match anything)."""
    parts = re.split(r"\{(\w+)\}", layout)
    pattern = "".join(re.escape(part) if i % 2 == 0 else "(?P<window_start>\\d{8}T\\d{6}Z)"
                      if part == "window_start" else re.escape(view) if part == "view" else ".*?"
                      for i, part in enumerate(parts))
    return re.compile(pattern + r"\Z")


@dataclass(frozen=True)
class Mismatch:
    key: str
    field: str
    redis: int
    recount: int


@dataclass(frozen=True)
class ViewCheck:
    """A view's counters in Redis against verify's recount of its topic, in the windows still within
    its ttl, and the job's rejects that the records do not bear out."""

    view: str
    #: The earliest window start compared (windows before it may have expired in Redis).
    since: datetime
    windows: int
    counters: int
    mismatched: int
    mismatches: tuple[Mismatch, ...]
    #: Events left out because the views job rejected them for this view, for a reason they show.
    rejected: int
    #: Events recounted, the rejected ones included.
    checked: int = 0
    unjustified: int = 0
    #: The first of the unjustified rejects: "topic[p]@o: kind (why it does not hold)".
    unjustified_at: tuple[str, ...] = ()
    invariant = Invariant.views

    @property
    def subject(self) -> str:
        return self.view

    @property
    def verdict(self) -> Verdict:
        return Verdict.FAIL if self.mismatched or self.unjustified else Verdict.PASS

    @property
    def summary(self) -> str:
        return (f"{self.windows:,} window(s) since {self.since:%Y-%m-%d %H:%M} UTC, {self.counters:,} counters "
                f"compared, {self.mismatched:,} differ; {self.rejected:,} rejected event(s) left out of the recount, "
                f"{self.unjustified:,} rejected without cause")

    @property
    def problems(self) -> tuple[str, ...]:
        return (tuple(f"{m.key} {m.field}: redis {m.redis:,}, recount {m.recount:,}" for m in self.mismatches)
                + tuple(f"rejected without cause: {r}" for r in self.unjustified_at))


def compare_view(name: str, layout: str, since_ms: int, held: Mapping[str, Mapping[str, int]],
                 counted: Recount) -> ViewCheck:
    """Every counter of every key in a window from ``since_ms`` on, either side; a counter one side
    lacks is 0 there."""
    pattern = window_pattern(name, layout)
    first_label = _label(since_ms)
    windows: dict[str, str] = {}
    for key in set(held) | set(counted.counters):
        found = pattern.match(key)
        # Labels are fixed-width UTC times: they sort as the times do.
        if found is not None and found["window_start"] >= first_label:
            windows[key] = found["window_start"]
    mismatches, counters = [], 0
    for key in sorted(windows):
        ours, theirs = held.get(key, {}), counted.counters.get(key, {})
        for field_name in sorted(set(ours) | set(theirs)):
            counters += 1
            if ours.get(field_name, 0) != theirs.get(field_name, 0):
                mismatches.append(Mismatch(key, field_name, ours.get(field_name, 0), theirs.get(field_name, 0)))
    since = datetime.strptime(first_label + "+0000", LABEL_FORMAT + "%z")
    return ViewCheck(name, since, len(set(windows.values())), counters, len(mismatches), tuple(mismatches[:SAMPLE]),
                     counted.rejected, counted.checked, len(counted.unjustified), counted.unjustified[:SAMPLE])
