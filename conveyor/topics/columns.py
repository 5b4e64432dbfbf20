"""What column the lake gives each field of a contract: the closest Spark type, or the value's
JSON text where no single plain type fits (objects, arrays, unions). Pure, and below the parts that
read it: the lake's tables (conveyor.pipeline.schema) and the check of a new contract version
against them (conveyor.topics.sink_fit)."""

from __future__ import annotations

from enum import Enum
from typing import Any


class Kind(str, Enum):
    string = "string"
    long = "bigint"
    double = "double"
    boolean = "boolean"
    timestamp = "timestamp"
    #: No single plain type: the value's JSON text.
    json = "json"

    @property
    def spark_type(self) -> str:
        return "string" if self is Kind.json else self.value


#: Where a row came from, after the contract's columns.
COORDINATES = (
    ("kafka_partition", "int"),
    ("kafka_offset", "bigint"),
    ("kafka_timestamp", "timestamp"),
    ("raw_value", "binary"),
)
#: When the row's run listed the partitions' ends: the same instant for every row of a commit, so
#: its data files' bounds select exactly the files landed since a moment (de-dup reads only those).
LANDED_AT = "landed_at"

#: The parser's verdict beside the columns: None for a good record, else why it is quarantined.
REASON = "quarantine_reason"

#: Names the lake's own columns take: no contract field may have one.
RESERVED = frozenset({name for name, _ in COORDINATES} | {REASON, LANDED_AT})

_PLAIN = {"string": Kind.string, "integer": Kind.long, "number": Kind.double, "boolean": Kind.boolean}


def column_kind(spec: Any) -> Kind:
    """The kind of column a field's schema lands in."""
    if not isinstance(spec, dict):
        return Kind.json
    if spec.get("format") == "date-time":
        return Kind.timestamp
    types = spec.get("type")
    if isinstance(types, list):
        non_null = [t for t in types if t != "null"]
        types = non_null[0] if len(non_null) == 1 else None
    if types is None and "enum" in spec:
        values = spec["enum"]
        if values and all(isinstance(v, str) for v in values):
            return Kind.string
    return _PLAIN.get(types, Kind.json) if isinstance(types, str) else Kind.json


def field_kinds(schema: dict[str, Any]) -> dict[str, Kind]:
    """Each property's column kind, in the schema's order; event_time is always a timestamp."""
    kinds = {name: column_kind(spec) for name, spec in (schema.get("properties") or {}).items()}
    return {name: Kind.timestamp if name == "event_time" else kind for name, kind in kinds.items()}
