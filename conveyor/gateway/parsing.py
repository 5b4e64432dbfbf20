"""From a request body to Kafka records: parse, check sizes and the contract, key by the contract.

Pure. Every event is checked before any is returned, so a request with one bad event writes none.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from conveyor.config import Gateway as GatewaySettings
from conveyor.gateway.errors import ContractViolation, MalformedBody, TooLarge
from conveyor.gateway.writer import Record
from conveyor.topics.contracts import Contract, event_hour

NDJSON_TYPES = ("application/x-ndjson", "application/ndjson", "application/jsonl")


@dataclass(frozen=True)
class Prepared:
    records: list[Record]
    #: Event hour of each record, for the audit counts.
    hours: list[datetime]


def parse_events(body: bytes, content_type: str) -> list[Any]:
    """One JSON event, a JSON array of events, or NDJSON (one event per line)."""
    if not body.strip():
        raise MalformedBody("empty body: send one JSON event, a JSON array, or NDJSON")
    if content_type.split(";")[0].strip().lower() in NDJSON_TYPES:
        events = []
        for line_number, line in enumerate(body.splitlines(), start=1):
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
    return parsed if isinstance(parsed, list) else [parsed]


def prepare(body: bytes, content_type: str, contract: Contract, settings: GatewaySettings) -> Prepared:
    events = parse_events(body, content_type)
    if not events:
        raise MalformedBody("no events in the request")
    records, hours = [], []
    for index, event in enumerate(events):
        if not isinstance(event, dict):
            raise MalformedBody(f"event {index} is a JSON {type(event).__name__}, not an object", index=index)
        violation = contract.check(event)
        if violation is not None:
            raise ContractViolation(f"event {index}: {violation.message}", index=index,
                                    field=violation.field, rule=violation.rule)
        value = orjson.dumps(event)
        if len(value) > settings.max_event_bytes:
            raise TooLarge(f"event {index} is {len(value)} bytes, above the limit of {settings.max_event_bytes}",
                           index=index, limit=settings.max_event_bytes)
        records.append(Record(contract.key_of(event), value))
        hours.append(event_hour(event))
    return Prepared(records, hours)
