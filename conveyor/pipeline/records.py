"""Kafka record values to lake rows, or to the reason they belong in quarantine. Pure.

Runs inside Spark's Python workers as a scalar Arrow UDF over the raw values: only the values
travel to Python (in Arrow batches), and only the verdict and the contract's columns travel back;
the JVM keeps the rest of each Kafka row, the value included. Everything a worker needs travels as
plain values (the contract's text, the columns); each worker compiles a contract once.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from functools import lru_cache
from typing import Any

import orjson
import pyarrow as pa
from conveyor_sdk.contract import CONTRACT_HEADER, read_contract

from conveyor.pipeline.schema import OUTSIDE, REASON, Column, Kind
from conveyor.pipeline.worker_path import forget_archives
from conveyor.topics.contracts import Contract, compile_contract, parse_event_time

#: The columns of a Kafka range that land as they are: our name -> the name Spark's Kafka connector
#: gives it.
PASSED_THROUGH = {
    "kafka_partition": "partition",
    "kafka_offset": "offset",
    "kafka_timestamp": "timestamp",
    "kafka_key": "key",
    "raw_value": "value",
}
_ARROW_TYPES = {
    Kind.string: pa.string(),
    Kind.json: pa.string(),
    Kind.long: pa.int64(),
    Kind.double: pa.float64(),
    Kind.boolean: pa.bool_(),
    # Spark hands over timestamps in the session's zone, which the pipelines set to UTC.
    Kind.timestamp: pa.timestamp("us", tz="UTC"),
}


class _Reject(Exception):
    """The value cannot become a row; ``args[0]`` is the reason stored with it in quarantine."""


@lru_cache(maxsize=64)
def _contract(topic: str, schema_text: str) -> Contract:
    return compile_contract(topic, orjson.loads(schema_text))


def _timestamp(name: str) -> Callable[[Any], datetime]:
    def convert(value: Any) -> datetime:
        try:
            return parse_event_time(value)
        except ValueError as err:
            raise _Reject(f"{name}: {value!r} cannot be placed in time ({err})") from None

    return convert


def _json_text(value: Any) -> str:
    return orjson.dumps(value).decode()


def _converter(column: Column) -> Callable[[Any], Any] | None:
    """None where the contract already guarantees the Python value fits the column."""
    return {
        Kind.timestamp: _timestamp(column.name),
        # The contract bounds every integer to 64 bits; drafts 6+ count 1.0 as an integer.
        Kind.long: int,
        Kind.double: float,
        Kind.json: _json_text,
    }.get(column.kind)


#: Confluent's serializers frame a value as this byte, then the schema id: FRAME bytes in all.
FRAMED, FRAME = b"\x00", 5

#: A contract version as the workers get it: (version number, id, schema text).
VersionText = tuple[int, int, str]


class RecordParser:
    """Parses one topic's values against its contract: the version a record's header says the
    gateway checked it against (``versions``: the registry's, as plain values), or ``schema_text``
    for a record that names none."""

    def __init__(self, topic: str, schema_text: str, columns: tuple[Column, ...],
                 versions: tuple[VersionText, ...] = ()) -> None:
        self._topic = topic
        self._contract = _contract(topic, schema_text)
        self._versions = {number: (schema_id, text) for number, schema_id, text in versions}
        self._by_id = {schema_id: text for _, schema_id, text in versions}
        self._names = [c.name for c in columns]
        self._known = frozenset(self._names)
        self._converted = [(c.name, convert) for c in columns if (convert := _converter(c)) is not None]
        self._nothing = (None,) * len(columns)

    def names_unheld(self, header: bytes | None) -> bool:
        """Whether ``header`` names a version this parser was not given: one registered after its
        versions were read, or one the registry never held."""
        named = read_contract(header) if header is not None else None
        return named is not None and self._versions.get(named.version, (None,))[0] != named.id

    def _contract_named(self, header: bytes | None) -> Contract:
        if header is None:
            return self._contract
        named = read_contract(header)
        if named is None:
            raise _Reject(f"its {CONTRACT_HEADER} header {header[:40]!r} names no contract version")
        schema_id, number = named
        held = self._versions.get(number)
        if held is None or held[0] != schema_id:
            raise _Reject(f"checked at the gateway against contract version {number} (id {schema_id}), which the "
                          "registry does not hold")
        return _contract(self._topic, held[1])

    def _unframed(self, value: bytes) -> tuple[bytes, Contract | None]:
        """The JSON of a value framed by Confluent's serializers (a zero byte, then the schema id in
        four bytes, big-endian), and the contract version that id names; JSON never starts with a
        zero byte, so any other value is JSON as it is."""
        if not value.startswith(FRAMED):
            return value, None
        if len(value) < FRAME:
            raise _Reject(f"framed as Confluent's serializers frame a value, but {len(value)} bytes long")
        schema_id = int.from_bytes(value[1:FRAME], "big")
        text = self._by_id.get(schema_id)
        if text is None:
            raise _Reject(f"written with schema id {schema_id} (Confluent's framing), which the registry holds for no "
                          f"version of {self._topic}")
        return value[FRAME:], _contract(self._topic, text)

    def _event(self, value: bytes | None, header: bytes | None = None) -> dict[str, Any]:
        """The event, its fields converted to their columns' types where they need it."""
        if value is None:
            raise _Reject("no value (null record)")
        value, framed = self._unframed(value)
        contract = framed if framed is not None and header is None else self._contract_named(header)
        try:
            event = orjson.loads(value)
        except orjson.JSONDecodeError as err:
            raise _Reject(f"not JSON: {err}") from None
        if not isinstance(event, dict):
            raise _Reject(f"not a JSON object but a {type(event).__name__}")
        violation = contract.check(event)
        if violation is not None:
            raise _Reject(f"breaks the contract: {violation.message} (rule {violation.rule})")
        for name, convert in self._converted:
            field = event.get(name)
            if field is not None:
                event[name] = convert(field)
        return event

    def parse(self, value: bytes | None, header: bytes | None = None) -> tuple[Any, ...]:
        """``(None, *column values)`` for a good record, ``(reason, None, ...)`` for a bad one."""
        reason, event = self.event(value, header)
        return (reason, *self._nothing) if reason is not None else (None, *[event.get(name) for name in self._names])

    def event(self, value: bytes | None, header: bytes | None = None) -> tuple[str | None, dict[str, Any]]:
        """``(None, event)`` for a good record, its fields converted to their columns' types (fields
        outside the contract as they came); ``(reason, {})`` for a bad one."""
        try:
            return None, self._event(value, header)
        except _Reject as reject:
            return reject.args[0], _NO_EVENT

    def columns(self, values: list[bytes | None], headers: list[bytes | None] | None = None) -> list[list[Any]]:
        """The verdicts of ``values``, the contract's columns, and whether each event has fields
        outside them (``OUTSIDE``), column by column (a comprehension per column costs a third of
        building rows and transposing them). ``headers``: each record's contract header (None: it
        has none)."""
        reasons: list[str | None] = []
        events: list[dict[str, Any]] = []
        for value, header in zip(values, headers or [None] * len(values), strict=True):
            try:
                events.append(self._event(value, header))
                reasons.append(None)
            except _Reject as reject:
                events.append(_NO_EVENT)
                reasons.append(reject.args[0])
        outside = [not self._known.issuperset(event) for event in events]
        return [reasons] + [[event.get(name) for event in events] for name in self._names] + [outside]


#: A bad record's place in the columns: every column null.
_NO_EVENT: dict[str, Any] = {}


def parse_value(value: bytes | None, *, topic: str, schema_text: str, columns: tuple[Column, ...]) -> tuple[Any, ...]:
    return RecordParser(topic, schema_text, columns).parse(value)


def arrow_schema(columns: tuple[Column, ...]) -> pa.Schema:
    """The types of the parser's output columns after the passed-through ones."""
    return pa.schema([(REASON, pa.string())] + [(c.name, _ARROW_TYPES[c.kind]) for c in columns]
                     + [(OUTSIDE, pa.bool_())])


def values_parser(topic: str, schema_text: str, columns: tuple[Column, ...],
                  versions: tuple[VersionText, ...] = ()) -> Callable[[pa.Array, pa.Array], pa.Array]:
    """For a scalar Arrow UDF over the raw values and their contract headers (its type hints make
    it one): per value, the verdict, the contract's columns and whether it has fields outside
    them, as one struct.

    Arrow in and out, not pandas: the columns are built as Arrow arrays, which a pandas UDF would
    turn into pandas and PySpark back into Arrow again.
    """
    schema = arrow_schema(columns)

    def parse(values: pa.Array, headers: pa.Array) -> pa.Array:
        forget_archives()
        parser = RecordParser(topic, schema_text, columns, versions)
        built = parser.columns(values.to_pylist(), headers.to_pylist())
        arrays = [pa.array(column, type=field.type) for column, field in zip(built, schema, strict=True)]
        return pa.StructArray.from_arrays(arrays, fields=list(schema))

    return parse
