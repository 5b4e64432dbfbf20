"""What every sink of a topic can take of a new contract version, whatever the compatibility rule
says: a rule of NONE lets a producer break its readers, never the platform's own tables and
counters. Pure: the registry asks before it registers.

- **The lake** keeps one Iceberg table per topic with a column per field any version had. Iceberg
  changes a column's type only by promotion (int to long, float to double, a wider decimal), and
  the lake's columns are already the widest of each kind (integer is ``bigint``, number is
  ``double``), so a field whose column kind changes (``integer`` to ``number``, ``string`` to
  ``integer``) is refused. A field added is a new optional column; a field removed keeps its column.
- **The views** read the fields platform.yaml's views name: each must stay, and a summed one must
  stay an integer.
- **The key** (``x-key``) decides a record's partition: the order of one key's events, the
  dispatcher's per-key delivery and the lake's de-duplication within a partition all hang on it, so
  it cannot move to another field. ``event_id``, which exact delivery de-duplicates by, is already
  required of every version (conveyor.topics.contracts).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from conveyor.config import Platform
from conveyor.topics.columns import RESERVED, field_kinds
from conveyor.topics.compatibility import Incompatibility

LAKE = ("the lake's column cannot change its type in place (Iceberg only promotes int to long, float to double "
        "and a decimal wider); add a field of another name instead")
KEY = "a key moved to another field would split one key's events across partitions"


def sink_conflicts(platform: Platform, topic: str, earlier: Sequence[tuple[int, Any]],
                   new: Any) -> list[Incompatibility]:
    """What the topic's sinks cannot take of ``new`` after the ``earlier`` versions ((number,
    schema), oldest first)."""
    if not isinstance(new, dict):
        return []
    return [*_lake(platform, topic, earlier, new), *_views(platform, topic, earlier, new), *_key(earlier, new)]


def _lake(platform: Platform, topic: str, earlier: Sequence[tuple[int, Any]], new: dict[str, Any]) \
        -> Iterator[Incompatibility]:
    spec = platform.topics.get(topic)
    if spec is None or "lake" not in spec.consumers and topic not in (platform.pipeline.lake.topics or []):
        return
    kinds = field_kinds(new)
    clashes = sorted(RESERVED & set(kinds))
    if clashes:
        yield Incompatibility(", ".join(clashes), "reserved_column", None, None,
                              sink="the lake keeps its own columns under these names")
        return
    had: dict[str, tuple[int, str]] = {}
    for number, schema in earlier:
        if isinstance(schema, dict):
            had |= {name: (number, kind.spark_type) for name, kind in field_kinds(schema).items()}
    for name, kind in kinds.items():
        number, old = had.get(name, (None, kind.spark_type))
        if old != kind.spark_type:
            yield Incompatibility(name, "lake_column_type_changed", old, kind.spark_type, number, sink=LAKE)


def _views(platform: Platform, topic: str, earlier: Sequence[tuple[int, Any]], new: dict[str, Any]) \
        -> Iterator[Incompatibility]:
    properties = new.get("properties") or {}
    number, old = earlier[-1] if earlier else (None, {})
    had = (old.get("properties") or {}) if isinstance(old, dict) else {}
    for name, view in platform.pipeline.realtime.views.items():
        if view.topic == topic:
            for field, used_in, _ in view.contract_gaps(properties):
                kind = "type_changed" if field in properties else "field_removed"
                yield Incompatibility(field, kind, _type(had.get(field)), _type(properties.get(field)), number,
                                      sink=f"view {name} reads it ({used_in})")


def _type(spec: Any) -> Any:
    return spec.get("type", spec) if isinstance(spec, dict) else spec


def _key(earlier: Sequence[tuple[int, Any]], new: dict[str, Any]) -> Iterator[Incompatibility]:
    if earlier and isinstance(earlier[-1][1], dict):
        number, old = earlier[-1]
        if old.get("x-key") != new.get("x-key"):
            yield Incompatibility("x-key", "key_field_changed", old.get("x-key"), new.get("x-key"), number, sink=KEY)
