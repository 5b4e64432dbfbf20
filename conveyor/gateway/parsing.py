"""From a request body to Kafka records: parse, check sizes and the contract, key by the contract.

Pure. Every event is checked before any is returned, so a request with one bad event writes none;
every limit an event could break later on its way to Kafka (the producer's and the topic's message
size, orjson's nesting depth) is checked here, so nothing is refused after the first is queued.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from conveyor.gateway.errors import ContractViolation, MalformedBody, TooLarge, UnsupportedMediaType
from conveyor.gateway.writer import Record
from conveyor.topics.contracts import Contract, parse_event_time

JSON_TYPES = ("application/json",)
NDJSON_TYPES = ("application/x-ndjson", "application/ndjson", "application/jsonl")


@dataclass(frozen=True)
class Prepared:
    records: list[Record]


def media_type(content_type: str | None) -> str:
    """The request's media type, JSON when it names none; 415 for anything else."""
    media = (content_type or JSON_TYPES[0]).split(";")[0].strip().lower()
    if media not in JSON_TYPES and media not in NDJSON_TYPES:
        raise UnsupportedMediaType(f"Content-Type {media!r} is not accepted: send application/json (one event "
                                   "or an array) or application/x-ndjson (one event per line)",
                                   accepted=[*JSON_TYPES, *NDJSON_TYPES])
    return media


def _too_many(count: int, max_events: int) -> TooLarge:
    return TooLarge(f"request has {count} events, above the limit of {max_events}; split it", limit=max_events)


def parse_events(body: bytes, content_type: str, max_events: int) -> list[Any]:
    """One JSON event, a JSON array of events, or NDJSON (one event per line). NDJSON's events are
    counted before any is parsed, so a body of too many is refused at the cost of finding its lines."""
    if not body.strip():
        raise MalformedBody("empty body: send one JSON event, a JSON array, or NDJSON")
    if media_type(content_type) in NDJSON_TYPES:
        lines = body.splitlines()
        # Blank lines are no events; they are looked for only when the lines alone are too many.
        if len(lines) > max_events and (count := sum(map(bool, map(bytes.strip, lines)))) > max_events:
            raise _too_many(count, max_events)
        events = []
        for line_number, line in enumerate(lines, start=1):
            if line.strip():
                try:
                    events.append(orjson.loads(line))
                except orjson.JSONDecodeError as err:
                    raise MalformedBody(f"line {line_number} is not valid JSON: {err}", line=line_number) from None
        return events
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError as err:
        raise MalformedBody(f"body is not valid JSON: {err}") from None
    events = parsed if isinstance(parsed, list) else [parsed]
    if len(events) > max_events:
        raise _too_many(len(events), max_events)
    return events


def prepare(body: bytes, content_type: str, contract: Contract, max_event_bytes: int, max_events: int) -> Prepared:
    """``max_event_bytes`` bounds one record's key and value together: the smallest of the gateway's
    own limit and what the producer and the topic take (conveyor.limits)."""
    events = parse_events(body, content_type, max_events)
    if not events:
        raise MalformedBody("no events in the request")
    records = []
    for index, event in enumerate(events):
        if not isinstance(event, dict):
            raise MalformedBody(f"event {index} is a JSON {type(event).__name__}, not an object", index=index)
        violation = contract.check(event)
        if violation is not None:
            raise ContractViolation(f"event {index}: {violation.message}", index=index,
                                    field=violation.field, rule=violation.rule)
        try:
            parse_event_time(event["event_time"])  # the lake and the views place each event in time
        except ValueError as err:
            raise ContractViolation(f"event {index}: event_time {event['event_time']!r} cannot be placed in "
                                    f"time ({err})", index=index, field="event_time", rule="format") from None
        try:
            value = orjson.dumps(event)
        except orjson.JSONEncodeError as err:  # nested deeper than orjson writes (254 levels)
            raise ContractViolation(f"event {index} cannot be stored: {err}", index=index, field="(event)",
                                    rule="max_depth") from None
        key = contract.key_of(event)
        if len(key) + len(value) > max_event_bytes:
            raise TooLarge(f"event {index} is {len(key) + len(value)} bytes with its key, above the limit of "
                           f"{max_event_bytes}", index=index, limit=max_event_bytes)
        records.append(Record(key, value, contract.has_extra_fields(event)))
    return Prepared(records)
