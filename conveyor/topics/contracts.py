"""Topic contracts: one JSON Schema per topic, compiled once (fastjsonschema).

A contract is what a topic promises its consumers (MISSION.md section 3: the bus validates the
contract of every exchange). Every event carries ``event_id`` (UUID) and ``event_time`` (RFC 3339),
and the schema's ``x-key`` names the field whose value keys the Kafka record, so all events of one
key land in one partition, in order.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import lru_cache
from typing import Any

import fastjsonschema

from conveyor.config import Platform
from conveyor.errors import ConveyorError

REQUIRED_FIELDS = ("event_id", "event_time")
_FORMATS = {
    "uuid": re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"),
}


class ContractError(ConveyorError):
    """A contract file is missing, unreadable, or not a usable schema."""


@dataclass(frozen=True)
class Violation:
    """Why an event breaks its contract: the field (dotted path) and the JSON Schema rule."""

    field: str
    rule: str
    message: str


@dataclass(frozen=True)
class Contract:
    topic: str
    key_field: str
    _validate: Callable[[Any], Any]

    def check(self, event: Any) -> Violation | None:
        """None when ``event`` keeps the contract, else the first violation found."""
        try:
            self._validate(event)
        except fastjsonschema.JsonSchemaValueException as err:
            return _violation(err)
        return None

    def key_of(self, event: dict[str, Any]) -> bytes:
        return str(event[self.key_field]).encode()


def _violation(err: fastjsonschema.JsonSchemaValueException) -> Violation:
    field = ".".join(str(p) for p in (err.path or [])[1:])  # drop the leading "data"
    message = err.message.replace("data.", "", 1).replace("data ", "event ", 1)
    if err.rule == "required" and isinstance(err.value, dict):
        missing = [name for name in err.definition.get("required", []) if name not in err.value]
        field = ".".join(filter(None, [field, missing[0] if missing else ""]))
        message = f"{field} is required"
    return Violation(field or "(event)", err.rule or "schema", message)


def event_hour(event: dict[str, Any]) -> datetime:
    """The start of the event's hour in UTC (audit counts are kept per event hour)."""
    text: str = event["event_time"]
    # Nearly every event is stamped in UTC, and the events of a request share a few hours: the
    # hour of "YYYY-MM-DDTHH...Z" is its first 13 characters, parsed once per hour, not per event.
    if text[-1:] in "Zz" and text[10:11] in "Tt":
        return _utc_hour(text[:13])
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).replace(minute=0, second=0, microsecond=0)


@lru_cache(maxsize=1024)
def _utc_hour(prefix: str) -> datetime:
    return datetime.fromisoformat(prefix.upper() + ":00:00+00:00")


def compile_contract(topic: str, schema: dict[str, Any]) -> Contract:
    required = schema.get("required", [])
    missing = [f for f in REQUIRED_FIELDS if f not in required]
    if missing:
        raise ContractError(f"contract of topic {topic} must require {', '.join(missing)}")
    key_field = schema.get("x-key")
    if not key_field or key_field not in required:
        raise ContractError(f"contract of topic {topic} must name a required key field in x-key")
    try:
        validate = fastjsonschema.compile(schema, formats={k: v.pattern for k, v in _FORMATS.items()})
    except fastjsonschema.JsonSchemaDefinitionException as err:
        raise ContractError(f"contract of topic {topic} is not a valid JSON Schema: {err}") from None
    return Contract(topic, key_field, validate)


def load_contracts(platform: Platform) -> dict[str, Contract]:
    """Every declared topic's contract, compiled; topics without one are absent."""
    contracts = {}
    for topic, spec in platform.topics.items():
        if spec.contract is None:
            continue
        path = platform.resolve(spec.contract)
        try:
            schema = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            raise ContractError(f"contract of topic {topic} ({path}) cannot be read: {err}") from None
        contracts[topic] = compile_contract(topic, schema)
    return contracts
