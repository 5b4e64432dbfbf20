"""A lake table's columns, derived from the topic's contract (JSON Schema). Pure.

Every property of the contract becomes a column of the closest Spark type; anything without one
plain type (objects, arrays, unions) is kept as its JSON text. Kafka's coordinates and the raw value
follow, so every row can be traced back to the record it came from.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from conveyor.config import Platform, read_contract
from conveyor.pipeline.errors import LakeConfigError


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


@dataclass(frozen=True)
class Column:
    name: str
    kind: Kind

    @property
    def ddl(self) -> str:
        return f"{quote(self.name)} {self.kind.spark_type}"


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

_PLAIN = {"string": Kind.string, "integer": Kind.long, "number": Kind.double, "boolean": Kind.boolean}


def quote(identifier: str) -> str:
    return "`" + identifier.replace("`", "``") + "`"


def _kind(spec: Any) -> Kind:
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


def contract_columns(topic: str, schema: dict[str, Any]) -> tuple[Column, ...]:
    """The contract's columns, in the schema's order; event_time is always a timestamp."""
    properties = schema.get("properties") or {}
    taken = {name for name, _ in COORDINATES} | {REASON, LANDED_AT}
    clashes = sorted(taken & set(properties))
    if clashes:
        raise LakeConfigError(f"contract of topic {topic} uses column names the lake reserves: {', '.join(clashes)}")
    columns = [Column(name, _kind(spec)) for name, spec in properties.items()]
    return tuple(Column(c.name, Kind.timestamp) if c.name == "event_time" else c for c in columns)


def versions_columns(topic: str, schemas: list[dict[str, Any]]) -> tuple[Column, ...]:
    """The columns of every version of a topic's contract (oldest first): the latest's, then those
    only earlier versions had, so no column a row once filled goes away."""
    columns: dict[str, Column] = {}
    for schema in reversed(schemas):
        for column in contract_columns(topic, schema):
            columns.setdefault(column.name, column)
    return tuple(columns.values())


def table_columns_ddl(columns: tuple[Column, ...]) -> str:
    return ", ".join([c.ddl for c in columns] + [f"{name} {kind}" for name, kind in COORDINATES]
                     + [f"{LANDED_AT} timestamp"])


def read_schema(platform: Platform, topic: str) -> dict[str, Any]:
    spec = platform.topics.get(topic)
    if spec is None or spec.contract is None:
        raise LakeConfigError(f"topic {topic} has no contract in platform.yaml; the lake's columns come from it")
    return read_contract(platform, topic)
