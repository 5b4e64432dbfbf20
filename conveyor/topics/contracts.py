"""Topic contracts: one JSON Schema (draft 2020-12) per topic, compiled once with jsonschema-rs.

A contract is what a topic promises its consumers (docs/architecture.md, section 1: the bus
validates the contract of every exchange). Every event carries ``event_id`` (UUID) and
``event_time`` (RFC 3339), and the schema's ``x-key`` names the field whose value keys the Kafka
record, so all events of one key land in one partition, in order.

The gateway and the lake check events with the same :class:`Contract`, so what one accepts the
other lands. The platform has one numeric model: a JSON Schema ``integer`` is a signed 64-bit
integer everywhere (the lake's columns, the real-time sums), so a contract's integers are bounded
to that range when it is compiled, and an event outside it is refused at the gateway.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import jsonschema_rs

from conveyor.config import Platform, read_contract
from conveyor.errors import ConveyorError

REQUIRED_FIELDS = {"event_id": "uuid", "event_time": "date-time"}
DRAFT = "https://json-schema.org/draft/2020-12/schema"
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

#: Every keyword of draft 2020-12's vocabularies (core, applicator, unevaluated, validation,
#: format-annotation, content, meta-data). Any other key of a schema is refused at load, unless it
#: starts with "x-": a misspelt keyword would otherwise be ignored, and its rule silently unchecked.
KEYWORDS = frozenset({
    "$schema", "$id", "$ref", "$anchor", "$dynamicRef", "$dynamicAnchor", "$vocabulary", "$comment", "$defs",
    "allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas", "prefixItems", "items",
    "contains", "properties", "patternProperties", "additionalProperties", "propertyNames",
    "unevaluatedItems", "unevaluatedProperties",
    "type", "enum", "const", "multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum",
    "maxLength", "minLength", "pattern", "maxItems", "minItems", "uniqueItems", "maxContains", "minContains",
    "maxProperties", "minProperties", "required", "dependentRequired",
    "format", "contentEncoding", "contentMediaType", "contentSchema",
    "title", "description", "default", "deprecated", "readOnly", "writeOnly", "examples",
})
#: Keywords whose value is a schema, a list of schemas, or a map of names to schemas.
_ONE_SCHEMA = ("additionalProperties", "contains", "not", "if", "then", "else", "items", "propertyNames",
               "unevaluatedItems", "unevaluatedProperties", "contentSchema")
_SCHEMA_LIST = ("allOf", "anyOf", "oneOf", "prefixItems")
_SCHEMA_MAP = ("properties", "patternProperties", "dependentSchemas", "$defs")


class ContractError(ConveyorError):
    """A contract file is missing, unreadable, or not a schema this platform can enforce."""


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
    _validator: Any
    #: The top-level fields the contract declares (``properties``): the lake's columns.
    declared: frozenset[str] = frozenset()

    def check(self, event: Any) -> Violation | None:
        """None when ``event`` keeps the contract, else the first violation found."""
        try:
            self._validator.validate(event)
        except jsonschema_rs.ValidationError as err:
            return _violation(err)
        except ValueError as err:  # a value jsonschema-rs cannot take in (an integer beyond 64 bits)
            return Violation("(event)", "type", f"event holds a value JSON Schema cannot check: {err}")
        return None

    def key_of(self, event: dict[str, Any]) -> bytes:
        return str(event[self.key_field]).encode()

    def has_extra_fields(self, event: dict[str, Any]) -> bool:
        """Whether the event has a top-level field the contract does not declare (which
        ``additionalProperties`` or ``patternProperties`` may let through)."""
        return not self.declared.issuperset(event)


def _violation(err: jsonschema_rs.ValidationError) -> Violation:
    path = [str(p) for p in err.instance_path]
    rule = str(err.schema_path[-1]) if err.schema_path else "schema"
    if rule == "required":
        path.append(str(err.kind.property))
        return Violation(".".join(path), rule, f"{'.'.join(path)} is required")
    field = ".".join(path)
    return Violation(field or "(event)", rule, f"{field}: {err.message}" if field else err.message)


def parse_event_time(text: Any) -> datetime:
    """An RFC 3339 time as an aware datetime; ValueError when Python cannot place it (a leap
    second, or an offset that carries it outside years 1-9999 in UTC). The gateway refuses such an
    event, so the lake and the real-time views, which parse the same way, place every event."""
    if not isinstance(text, str):
        raise ValueError(f"{text!r} is not an RFC 3339 time")
    # RFC 3339 allows a lower-case "t" and "z", which fromisoformat does not.
    moment = datetime.fromisoformat(text.upper())
    if moment.tzinfo is None:
        return moment.replace(tzinfo=timezone.utc)
    # Only the first and the last year can leave datetime's range once in UTC (OverflowError, not
    # ValueError): the audit hour, the lake's UTC timestamp and the views' windows all need it.
    if moment.year in (1, 9999):
        try:
            moment.astimezone(timezone.utc)
        except OverflowError:
            raise ValueError(f"{text} is outside years 1 to 9999 once in UTC") from None
    return moment


def _check_and_bound(schema: Any, where: str, problems: list[str]) -> Any:
    """``schema`` with every ``integer`` bounded to 64 bits; what it cannot enforce goes to problems.
    Values of the wrong shape are left for the meta-schema check that follows."""
    if not isinstance(schema, dict):
        return schema
    here = where or "/"
    unknown = sorted(k for k in schema if k not in KEYWORDS and not k.startswith("x-"))
    if unknown:
        problems.append(f"{here}: {', '.join(unknown)} not a draft 2020-12 keyword (extensions start with x-)")
    for keyword in ("$ref", "$dynamicRef"):
        if keyword in schema and not str(schema[keyword]).startswith("#"):
            problems.append(f"{here}: {keyword} {schema[keyword]!r} leaves the contract; only local references "
                            "(#...) are allowed, since nothing is fetched at run time")
    bounded = dict(schema)
    types = schema.get("type")
    if types == "integer" or (isinstance(types, list) and "integer" in types and "number" not in types):
        if not isinstance(schema.get("maximum"), int | float) or schema["maximum"] > INT64_MAX:
            bounded["maximum"] = INT64_MAX
        if not isinstance(schema.get("minimum"), int | float) or schema["minimum"] < INT64_MIN:
            bounded["minimum"] = INT64_MIN
    for keyword in _ONE_SCHEMA:
        if keyword in schema:
            bounded[keyword] = _check_and_bound(schema[keyword], f"{where}/{keyword}", problems)
    for keyword in _SCHEMA_LIST:
        if isinstance(schema.get(keyword), list):
            bounded[keyword] = [_check_and_bound(sub, f"{where}/{keyword}/{i}", problems)
                                for i, sub in enumerate(schema[keyword])]
    for keyword in _SCHEMA_MAP:
        if isinstance(schema.get(keyword), dict):
            bounded[keyword] = {name: _check_and_bound(sub, f"{where}/{keyword}/{name}", problems)
                                for name, sub in schema[keyword].items()}
    return bounded


def compile_contract(topic: str, schema: dict[str, Any]) -> Contract:
    declared = schema.get("$schema", DRAFT)
    if declared.rstrip("#") != DRAFT:
        raise ContractError(f"contract of topic {topic} declares {declared}; contracts are read under "
                            f"draft 2020-12 only: set \"$schema\": \"{DRAFT}\"")
    required = schema.get("required", [])
    missing = [f for f in REQUIRED_FIELDS if f not in required]
    if missing:
        raise ContractError(f"contract of topic {topic} must require {', '.join(missing)}")
    for name, fmt in REQUIRED_FIELDS.items():
        declared_field = schema.get("properties", {}).get(name, {})
        if declared_field.get("type") != "string" or declared_field.get("format") != fmt:
            raise ContractError(f"contract of topic {topic} must declare {name} as "
                                f'{{"type": "string", "format": "{fmt}"}}')
    key_field = schema.get("x-key")
    if not key_field or key_field not in required:
        raise ContractError(f"contract of topic {topic} must name a required key field in x-key")
    problems: list[str] = []
    bounded = _check_and_bound(schema, "", problems)
    if problems:
        raise ContractError(f"contract of topic {topic} cannot be enforced: {'; '.join(problems)}")
    try:
        # Formats are assertions here (2020-12 makes them annotations by default): a contract's
        # "uuid" or "date-time" is a rule the lake relies on. An unknown format is refused.
        validator = jsonschema_rs.Draft202012Validator(bounded, validate_formats=True, ignore_unknown_formats=False)
    except (jsonschema_rs.ValidationError, ValueError) as err:
        first = str(err).strip().splitlines()[0]
        raise ContractError(f"contract of topic {topic} is not a valid draft 2020-12 schema: {first}") from None
    return Contract(topic, key_field, validator, frozenset(schema.get("properties", {})))


def load_contracts(platform: Platform) -> dict[str, Contract]:
    """Every declared topic's contract, compiled; topics without one are absent."""
    return {topic: compile_contract(topic, read_contract(platform, topic))
            for topic, spec in platform.topics.items() if spec.contract is not None}
