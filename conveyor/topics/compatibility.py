"""How a topic's contract may change: Confluent Schema Registry's compatibility rules, read for JSON
Schema. Pure: the registry (conveyor.bus) asks, and refuses what this finds.

A version is BACKWARD compatible when a reader holding it accepts every event written under the
version before (new reads old), FORWARD when a reader holding the version before accepts every
event written under it (old reads new), FULL when both hold. The TRANSITIVE rules ask the same of
every earlier version, not only the latest; NONE asks nothing.

"Accepts every event" is decided keyword by keyword, as one small check per keyword, each naming
what it found: the reader's rule must be no narrower than the writer's (its types cover the
writer's, its bounds are no tighter, it requires no field the writer may leave out). What the
checks cannot prove (a change under ``anyOf``, ``$ref``, ``patternProperties``) is refused, never
guessed: a contract that needs such a change moves under the rule NONE.

The content model decides what a field added or removed means. An open object (no
``additionalProperties``, or a schema for it) lets a writer send any other field: a reader that
adds a property constrains values old events may already carry, so adding a property to an open
model is not BACKWARD compatible, and removing one is. A closed object (``additionalProperties:
false``) sends no other field: adding an optional property is BACKWARD compatible, and removing one
is not. docs/contracts.md has the table.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from conveyor.config import Compatibility


@dataclass(frozen=True)
class Incompatibility:
    """One way a reader would refuse an event its writer accepts."""

    #: The field, dotted (``address.city``, ``tags[]``); ``(event)`` for the event itself.
    field: str
    #: What changed, as a name: ``type_narrowed``, ``required_added``, ``property_added_to_open_model``...
    kind: str
    #: The keyword's value on each side (None: absent).
    old: Any
    new: Any
    #: The earlier version this conflicts with, and which side read (BACKWARD: the new version).
    version: int | None = None
    direction: str = "backward"
    #: Set when a sink, not a reader, refuses the change (conveyor.topics.sink_fit): why it cannot take it.
    sink: str | None = None

    @property
    def message(self) -> str:
        change = f"{self.field}: {self.kind.replace('_', ' ')}"
        if (self.old, self.new) != (None, None):
            change += f" (was {_shown(self.old)}, now {_shown(self.new)})"
        if self.sink is not None:
            return f"{change}: {self.sink}"
        reader, writer = ("the new version", f"version {self.version}") if self.direction == "backward" \
            else (f"version {self.version}", "the new version")
        return f"{change}: {reader} would refuse events {writer} accepts"


def _shown(value: Any) -> str:
    return "absent" if value is None else repr(value)


@dataclass(frozen=True)
class Gap:
    """What a reader refuses of its writer's events: the field, what differs, each side's keyword."""

    field: str
    kind: str
    reader: Any
    writer: Any


def check(rule: Compatibility, new: Any, versions: Sequence[tuple[int, Any]]) -> list[Incompatibility]:
    """Every incompatibility of ``new`` under ``rule`` with the earlier ``versions`` ((number,
    schema), oldest first): the latest only, or all of them for a TRANSITIVE rule."""
    if rule is Compatibility.NONE or not versions:
        return []
    found: list[Incompatibility] = []
    for number, old in versions if rule.transitive else versions[-1:]:
        if rule.backward:
            found += [_at(gap, number, "backward") for gap in reader_gaps(new, old)]
        if rule.forward:
            found += [_at(gap, number, "forward") for gap in reader_gaps(old, new)]
    return found


def _at(gap: Gap, version: int, direction: str) -> Incompatibility:
    # BACKWARD: the new version reads the old one's events; FORWARD: the old reads the new's.
    old, new = (gap.writer, gap.reader) if direction == "backward" else (gap.reader, gap.writer)
    return Incompatibility(gap.field, gap.kind, old, new, version, direction)


# -- reader against writer ----------------------------------------------------------------------

_TYPES = frozenset({"null", "boolean", "object", "array", "number", "integer", "string"})
_ANNOTATIONS = frozenset({"$schema", "$id", "$comment", "title", "description", "default", "deprecated",
                          "readOnly", "writeOnly", "examples", "$anchor", "$dynamicAnchor", "$vocabulary"})
#: Keywords the checks below reason about; any other one must be equal on both sides.
_CHECKED = frozenset({"type", "enum", "const", "minLength", "maxLength", "pattern", "format", "minimum",
                      "exclusiveMinimum", "maximum", "exclusiveMaximum", "multipleOf", "properties", "required",
                      "additionalProperties", "minProperties", "maxProperties", "items", "prefixItems",
                      "minItems", "maxItems", "uniqueItems"})


def reader_gaps(reader: Any, writer: Any, field: str = "(event)") -> Iterator[Gap]:
    """What ``reader`` would refuse of the events ``writer`` accepts (nothing: it reads them all)."""
    if reader is True or reader == {} or writer is False:
        return
    if reader is False:
        yield Gap(field, "field_refused", False, writer)
        return
    if writer is True:
        writer = {}
    if not isinstance(reader, dict) or not isinstance(writer, dict):
        if reader != writer:
            yield Gap(field, "schema_changed", reader, writer)
        return
    yield from _unchecked(reader, writer, field)
    types = writer_types(writer)
    yield from _types(reader, writer, field)
    yield from _values(reader, writer, field)
    if "string" in types:
        yield from _strings(reader, writer, field)
    if types & {"number", "integer"}:
        yield from _numbers(reader, writer, field)
    if "object" in types:
        yield from _objects(reader, writer, field)
    if "array" in types:
        yield from _arrays(reader, writer, field)


def writer_types(schema: dict[str, Any]) -> set[str]:
    declared = schema.get("type")
    if declared is None:
        return set(_TYPES)
    types = {declared} if isinstance(declared, str) else set(declared)
    return types | {"integer"} if "number" in types else types


def _unchecked(reader: dict[str, Any], writer: dict[str, Any], field: str) -> Iterator[Gap]:
    """Keywords no check reasons about (combinators, references, pattern properties): a change to
    one cannot be proven compatible."""
    for keyword in sorted((set(reader) | set(writer)) - _CHECKED - _ANNOTATIONS):
        if keyword.startswith("x-"):
            continue
        if reader.get(keyword) != writer.get(keyword):
            yield Gap(field, f"{keyword}_changed", reader.get(keyword), writer.get(keyword))


def _types(reader: dict[str, Any], writer: dict[str, Any], field: str) -> Iterator[Gap]:
    if "type" not in reader:
        return
    read = writer_types(reader)
    missing = writer_types(writer) - read
    if missing:
        yield Gap(field, "type_narrowed", reader["type"], writer.get("type"))


def _allowed_values(schema: dict[str, Any]) -> list[Any] | None:
    if "const" in schema:
        return [schema["const"]]
    return list(schema["enum"]) if "enum" in schema else None


def _json_key(value: Any) -> Any:
    """A value as JSON compares it: true is not 1, 1.0 is 1."""
    if isinstance(value, bool) or value is None:
        return ("literal", value)
    if isinstance(value, int | float):
        return ("number", value)
    if isinstance(value, str):
        return ("string", value)
    return ("json", json.dumps(value, sort_keys=True))


def _values(reader: dict[str, Any], writer: dict[str, Any], field: str) -> Iterator[Gap]:
    read = _allowed_values(reader)
    if read is None:
        return
    written = _allowed_values(writer)
    allowed = {_json_key(value) for value in read}
    if written is None or any(_json_key(value) not in allowed for value in written):
        yield Gap(field, "enum_narrowed", read, written)


def _lower(reader: Any, writer: Any) -> bool:
    """A lower bound of the reader's (None: none) that the writer's never passes below."""
    return reader is None or (writer is not None and writer >= reader)


def _upper(reader: Any, writer: Any) -> bool:
    return reader is None or (writer is not None and writer <= reader)


def _strings(reader: dict[str, Any], writer: dict[str, Any], field: str) -> Iterator[Gap]:
    if not _lower(reader.get("minLength", 0), writer.get("minLength", 0)):
        yield Gap(field, "min_length_raised", reader.get("minLength"), writer.get("minLength"))
    if not _upper(reader.get("maxLength"), writer.get("maxLength")):
        yield Gap(field, "max_length_lowered", reader.get("maxLength"), writer.get("maxLength"))
    for keyword in ("pattern", "format"):
        if keyword in reader and reader[keyword] != writer.get(keyword):
            yield Gap(field, f"{keyword}_changed", reader[keyword], writer.get(keyword))


def _bound(schema: dict[str, Any], inclusive: str, exclusive: str) -> tuple[float, bool] | None:
    """A schema's tightest bound on one side: (value, exclusive)."""
    bounds = [(schema[inclusive], False)] if inclusive in schema else []
    bounds += [(schema[exclusive], True)] if exclusive in schema else []
    if not bounds:
        return None
    return (max if inclusive == "minimum" else min)(bounds, key=lambda b: (b[0], b[1] if inclusive == "minimum"
                                                                            else not b[1]))


def _numbers(reader: dict[str, Any], writer: dict[str, Any], field: str) -> Iterator[Gap]:
    for inclusive, exclusive, kind in (("minimum", "exclusiveMinimum", "minimum_raised"),
                                       ("maximum", "exclusiveMaximum", "maximum_lowered")):
        read, written = _bound(reader, inclusive, exclusive), _bound(writer, inclusive, exclusive)
        if read is None:
            continue
        within = written is not None and (
            (written[0] > read[0] if inclusive == "minimum" else written[0] < read[0])
            or (written[0] == read[0] and (written[1] or not read[1])))
        if not within:
            yield Gap(field, kind, read[0], None if written is None else written[0])
    step = reader.get("multipleOf")
    if step is not None and (writer.get("multipleOf") is None or writer["multipleOf"] % step != 0):
        yield Gap(field, "multiple_of_changed", step, writer.get("multipleOf"))


def _objects(reader: dict[str, Any], writer: dict[str, Any], field: str) -> Iterator[Gap]:
    def child(name: str) -> str:
        return name if field == "(event)" else f"{field}.{name}"

    written_required = set(writer.get("required", ()))
    for name in sorted(set(reader.get("required", ())) - written_required):
        yield Gap(child(name), "required_added", True, False)
    read_props, written_props = reader.get("properties", {}), writer.get("properties", {})
    read_rest, written_rest = reader.get("additionalProperties", True), writer.get("additionalProperties", True)
    # A name the writer's pattern properties may match could carry anything: assume it does.
    written_others = True if "patternProperties" in writer else written_rest
    for name in sorted(set(read_props) | set(written_props)):
        written = written_props.get(name, written_others)
        if written is False:
            continue  # the writer never sends it
        read = read_props.get(name, read_rest)
        gaps = list(reader_gaps(read, written, child(name)))
        if gaps and name not in read_props:
            kind = "property_removed_from_closed_model" if read is False else "property_removed"
            yield Gap(child(name), kind, None, written_props.get(name))
        elif gaps and name not in written_props:
            yield Gap(child(name), "property_added_to_open_model", read, None)
        else:
            yield from gaps
    if any(True for _ in reader_gaps(read_rest, written_rest, child("*"))):
        yield Gap(field, "content_model_closed" if read_rest is False else "additional_properties_narrowed",
                              read_rest, written_rest)
    yield from _counts(reader, writer, field, "minProperties", "maxProperties")


def _counts(reader: dict[str, Any], writer: dict[str, Any], field: str, low: str, high: str) -> Iterator[Gap]:
    if not _lower(reader.get(low, 0), writer.get(low, 0)):
        yield Gap(field, f"{low}_raised", reader.get(low), writer.get(low))
    if not _upper(reader.get(high), writer.get(high)):
        yield Gap(field, f"{high}_lowered", reader.get(high), writer.get(high))


def _arrays(reader: dict[str, Any], writer: dict[str, Any], field: str) -> Iterator[Gap]:
    read_prefix, written_prefix = reader.get("prefixItems", []), writer.get("prefixItems", [])
    read_items, written_items = reader.get("items", True), writer.get("items", True)
    for i in range(max(len(read_prefix), len(written_prefix))):
        read = read_prefix[i] if i < len(read_prefix) else read_items
        written = written_prefix[i] if i < len(written_prefix) else written_items
        yield from reader_gaps(read, written, f"{field}[{i}]")
    yield from reader_gaps(read_items, written_items, f"{field}[]")
    yield from _counts(reader, writer, field, "minItems", "maxItems")
    if reader.get("uniqueItems") and not writer.get("uniqueItems"):
        yield Gap(field, "unique_items_added", True, writer.get("uniqueItems"))
