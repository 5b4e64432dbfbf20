"""A trusted record's columns, parsed in the JVM: Spark's ``from_json`` and casts, no Python worker.

Only for records the gateway checked (conveyor.pipeline.trust): the JSON is an object that keeps a
version of the contract the registry holds, so what is left is to place each field in its column
exactly as the full check (conveyor.pipeline.records) does. Where the JVM cannot be sure of giving
the same value, the record is flagged (``needs_check``) and the lake reads its range again through
the full check:

- an integer is read by from_json as a bigint: a JSON integer that fits exactly; anything else
  (``1.0``, ``1e3``, which JSON Schema counts as integers, or one past 64 bits) leaves the value
  not read whole, so it is flagged and the full check places it;
- an event time is cast only when it has RFC 3339's shape with at most microseconds (what the
  gateway's checks let through); any other text is flagged;
- a field kept as its JSON text (an object, an array, a union) is flagged whenever it is present,
  since only the full check renders the text the way the lake stores it; a contract with such a
  field is not read in the JVM alone at all (``jvm_blocker``);
- a value ``from_json`` could not read whole (its corrupt-record column set) is flagged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from conveyor.pipeline.schema import Column, quote
from conveyor.topics.columns import Kind

if TYPE_CHECKING:
    from pyspark.sql import Column as SparkColumn

#: from_json's column for a value it could not read whole.
CORRUPT = "_conveyor_corrupt"
#: The parsed struct's column.
FAST = "_conveyor_fast"
#: Whether a record goes to the full check.
NEEDS_CHECK = "_conveyor_needs_check"
#: RFC 3339 with at most microseconds, upper-cased: the times the JVM casts as Python parses them.
RFC3339 = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?(Z|[+-][0-9]{2}:[0-9]{2})$"
#: What from_json reads each kind as; the rest is cast after (see the module's docstring).
_READ_AS = {Kind.string: "string", Kind.long: "bigint", Kind.double: "double", Kind.boolean: "boolean",
            Kind.timestamp: "string", Kind.json: "string"}


def jvm_blocker(columns: tuple[Column, ...]) -> str | None:
    """Why a trusted topic's records are not read in the JVM alone, or None: a field kept as JSON
    text (only the full check renders it as the lake stores it) would send every record that has
    it through a second read."""
    kept = [c.name for c in columns if c.kind == Kind.json]
    return f"its contract keeps {', '.join(kept)} as JSON text, which only the full check renders" if kept else None


def read_schema_ddl(columns: tuple[Column, ...]) -> str:
    """from_json's schema: each column as it is read, then the corrupt-record column."""
    return ", ".join([f"{quote(c.name)} {_READ_AS[c.kind]}" for c in columns] + [f"{CORRUPT} string"])


def parsed_struct(value: str, columns: tuple[Column, ...]) -> SparkColumn:
    """The value (a binary column) read by from_json into the columns' read types."""
    from pyspark.sql.functions import col, from_json

    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}
    return from_json(col(value).cast("string"), read_schema_ddl(columns), options)


def _field(column: Column) -> SparkColumn:
    from pyspark.sql.functions import col

    return col(FAST).getField(column.name)


def placed_name(column: Column) -> str:
    """Where :func:`placed` puts a column's value beside the parsed struct, apart from the record's
    own columns (a contract may name a field like one of them)."""
    return f"_conveyor_placed_{column.name}"


def placed_column(column: Column) -> SparkColumn:
    """The column :func:`placed` put under :func:`placed_name`."""
    from pyspark.sql.functions import col

    return col(quote(placed_name(column)))


def placed(column: Column) -> SparkColumn:
    """The column's value from the parsed struct, in the column's type."""
    from pyspark.sql.functions import expr, upper, when

    text = _field(column)
    if column.kind == Kind.timestamp:
        return when(upper(text).rlike(RFC3339), expr(f"try_cast(upper({FAST}.{quote(column.name)}) AS timestamp)"))
    return text


def needs_check(trusted: SparkColumn, columns: tuple[Column, ...]) -> SparkColumn:
    """True for a record the full check must parse: not ``trusted`` (a boolean that is never
    null), not read whole, or a field the JVM cannot place as the full check would. Reads the
    columns already placed (:func:`placed_column`) beside the parsed struct: placing a time again
    here would run its regular expression and cast twice per record, as Spark shares no
    expression inside an ``OR``."""
    from pyspark.sql.functions import col

    doubtful = col(FAST).isNull() | _field(Column(CORRUPT, Kind.string)).isNotNull()
    for column in columns:
        if column.kind == Kind.json:
            doubtful = doubtful | _field(column).isNotNull()
        elif column.kind == Kind.timestamp:
            doubtful = doubtful | (_field(column).isNotNull() & placed_column(column).isNull())
    return ~trusted | doubtful
