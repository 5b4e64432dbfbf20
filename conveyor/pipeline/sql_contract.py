"""A topic's contract as Spark SQL over the records that certainly keep it. Pure: SQL text only.

Parsing every record in Python costs the lake more than reading Kafka does. Yet nearly every record
is well-formed: the gateway checked it against this contract and wrote it with orjson. For those,
Spark checks the contract and extracts the columns in the JVM. Any other record goes to the exact
Python parser (``records.py``), which gives the verdict and its reason. So this check may say "not
sure" of a good record, but never "keeps" of one the Python parser would refuse, and the columns it
extracts are the values the Python parser would give.

Spark's JSON parser is laxer than orjson in one way that matters: it stops after the first value,
so ``{...} trailing`` parses. A record is taken as one JSON document only if Spark's parse, written
back with ``to_json``, has exactly as many bytes as the record. ``to_json`` writes the shortest form
of every token (no whitespace, the shortest escapes, numbers without trailing zeros), which is never
longer than any text Spark parsed it from, except a number with an exponent (``1e5`` comes back as
``100000.0``); records with one are left to Python. So equal lengths mean the text is that shortest
form, whole: no trailing content, no whitespace, and no lone surrogate (Spark reads it as "?").

Contracts using anything beyond the keywords below get no SQL check (``translate`` returns None) and
all their records take the Python path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from conveyor.pipeline.schema import Column, Kind

#: The parsed record (a VARIANT) in the SQL below.
DOC = "__conveyor_doc"
#: The raw Kafka value (BINARY) in the SQL below.
RAW = "raw_value"

_ANNOTATIONS = {"title", "description", "$comment", "examples", "default", "deprecated"}
_TOP_LEVEL = _ANNOTATIONS | {"$schema", "$id", "x-key", "type", "required", "properties"}
_PROPERTY = _ANNOTATIONS | {"type", "enum", "format", "minLength", "maxLength", "minimum", "maximum"}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: schema_of_variant's name of each JSON type a property may declare.
_VARIANT_TYPE = {"string": "STRING", "integer": "BIGINT", "boolean": "BOOLEAN"}
_KIND = {"string": Kind.string, "integer": Kind.long, "boolean": Kind.boolean}
#: A JSON number with an exponent, after the token that can precede a number.
_EXPONENT = r"[:,\[]\s*-?[0-9]+(\.[0-9]+)?[eE]"
_UUID = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
#: RFC 3339 as the contract's date-time format and Python's fromisoformat both take it, narrowed
#: to what Spark's cast reads the same way: years 1000-9999, up to microseconds, "T" and "Z".
_DATE_TIME = (r"^[1-9][0-9]{3}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]"
              r"(\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$")


@dataclass(frozen=True)
class SqlContract:
    #: True for a record that certainly keeps the contract (reads DOC and RAW); NULL or false otherwise.
    keeps: str
    #: Each contract column's value for such a record, in the columns' order.
    values: tuple[str, ...]

    @property
    def doc(self) -> str:
        return f"try_parse_json(CAST({RAW} AS STRING)) AS {DOC}"


def _literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _field(name: str, as_type: str | None = None) -> str:
    path = _literal(f"$.{name}")
    return f"variant_get({DOC}, {path}, {_literal(as_type)})" if as_type else f"variant_get({DOC}, {path})"


def _property(name: str, spec: Any, kind: Kind) -> tuple[str, str] | None:
    """(the checks of a present value, the column's value), or None where SQL cannot be exact."""
    if not isinstance(spec, dict) or not set(spec) <= _PROPERTY:
        return None
    json_type = spec.get("type")
    enum = spec.get("enum")
    if json_type is None and enum is not None:
        json_type = "string"
    if json_type not in _VARIANT_TYPE:
        return None
    checks = [f"schema_of_variant({_field(name)}) = '{_VARIANT_TYPE[json_type]}'"]
    value = _field(name, "string" if json_type == "string" else "bigint" if json_type == "integer" else "boolean")
    if enum is not None:
        if json_type != "string" or not isinstance(enum, list) or not enum or not all(isinstance(v, str) for v in enum):
            return None
        checks.append(f"{value} IN ({', '.join(_literal(v) for v in enum)})")
    for keyword, operator in (("minLength", ">="), ("maxLength", "<=")):
        if keyword in spec:
            limit = spec[keyword]
            if json_type != "string" or isinstance(limit, bool) or not isinstance(limit, int):
                return None
            checks.append(f"char_length({value}) {operator} {limit}")
    for keyword, operator in (("minimum", ">="), ("maximum", "<=")):
        if keyword in spec:
            limit = spec[keyword]  # an integer limit only: a float one compares differently in SQL
            if json_type != "integer" or isinstance(limit, bool) or not isinstance(limit, int):
                return None
            checks.append(f"{value} {operator} {limit}")
    format_ = spec.get("format")
    if format_ == "uuid" and json_type == "string":
        checks += [f"char_length({value}) = 36", f"{value} RLIKE {_literal(_UUID)}"]
    elif format_ == "date-time" and json_type == "string":
        timestamp = f"try_cast({value} AS TIMESTAMP)"
        checks += [f"{value} RLIKE {_literal(_DATE_TIME)}", f"{timestamp} IS NOT NULL"]
        value = timestamp
    elif format_ is not None:
        return None
    expected = Kind.timestamp if format_ == "date-time" else _KIND[json_type]
    if kind != expected:
        return None
    return " AND ".join(checks), value


def translate(schema: dict[str, Any], columns: tuple[Column, ...]) -> SqlContract | None:
    """The contract as SQL, or None when it uses a keyword or shape SQL cannot check exactly."""
    if not set(schema) <= _TOP_LEVEL or schema.get("type") != "object":
        return None
    properties, required = schema.get("properties") or {}, schema.get("required") or []
    if not required or not isinstance(properties, dict) or not set(required) <= set(properties):
        return None  # a required field proves the record is an object: variant paths miss on anything else
    kinds = {c.name: c.kind for c in columns}
    if set(kinds) != set(properties) or not all(_NAME.fullmatch(name) for name in properties):
        return None
    keeps = [f"is_valid_utf8({RAW})", f"{DOC} IS NOT NULL",
             f"octet_length(to_json({DOC})) = octet_length({RAW})",
             f"NOT CAST({RAW} AS STRING) RLIKE {_literal(_EXPONENT)}"]
    values = {}
    for name, spec in properties.items():
        translated = _property(name, spec, kinds[name])
        if translated is None:
            return None
        checks, values[name] = translated
        keeps.append(f"({checks})" if name in required else f"({_field(name)} IS NULL OR ({checks}))")
    return SqlContract(" AND ".join(keeps), tuple(values[c.name] for c in columns))
