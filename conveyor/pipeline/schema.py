"""A lake table's columns, derived from the topic's contract (JSON Schema). Pure.

Every property of the contract becomes a column of the closest Spark type (conveyor.topics.columns);
anything without one plain type (objects, arrays, unions) is kept as its JSON text. Kafka's
coordinates and the raw value follow, so every row can be traced back to the record it came from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from conveyor.config import Platform, read_contract
from conveyor.pipeline.errors import LakeConfigError
from conveyor.topics.columns import COORDINATES, LANDED_AT, REASON, RESERVED, Kind, field_kinds

#: Whether a parsed event has fields outside the table's columns: only then do its row's
#: ``raw_value`` bytes say more than the columns (unless pipeline.lake.keep_raw_value names the topic).
OUTSIDE = "_conveyor_outside"


@dataclass(frozen=True)
class Column:
    name: str
    kind: Kind

    @property
    def ddl(self) -> str:
        return f"{quote(self.name)} {self.kind.spark_type}"


def quote(identifier: str) -> str:
    return "`" + identifier.replace("`", "``") + "`"


def contract_columns(topic: str, schema: dict[str, Any]) -> tuple[Column, ...]:
    """The contract's columns, in the schema's order; event_time is always a timestamp."""
    kinds = field_kinds(schema)
    clashes = sorted(RESERVED & set(kinds))
    if clashes:
        raise LakeConfigError(f"contract of topic {topic} uses column names the lake reserves: {', '.join(clashes)}")
    return tuple(Column(name, kind) for name, kind in kinds.items())


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
