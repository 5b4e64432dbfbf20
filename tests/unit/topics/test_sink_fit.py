"""What the demo platform's sinks refuse of a new ad-events version, whatever the rule allows:
a lake column's kind changed, a field a view reads removed or no longer an integer, the key moved."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from conveyor.config import load_platform
from conveyor.topics.sink_fit import sink_conflicts

ROOT = Path(__file__).resolve().parents[3]
PLATFORM = load_platform(ROOT / "platform.yaml")
V1 = json.loads((ROOT / "contracts/ad-events.schema.json").read_text())


def changed(edit) -> dict:
    schema = copy.deepcopy(V1)
    edit(schema)
    return schema


def conflicts(new: dict, topic: str = "ad-events") -> list[tuple[str, str, object, object]]:
    return [(c.field, c.kind, c.old, c.new) for c in sink_conflicts(PLATFORM, topic, [(1, V1)], new)]


@pytest.mark.parametrize(("edit", "expected"), [
    # A new field is a new optional column; a field of the same kind is the same column.
    (lambda s: s["properties"].update(country={"type": "string", "maxLength": 2}), []),
    (lambda s: s["properties"]["site_id"].update(maxLength=128), []),
    (lambda s: s["properties"].pop("page_url"), []),  # the column stays; no view reads it
    # The lake cannot change a column's type in place.
    (lambda s: s["properties"].update(site_id={"type": "integer"}),
     [("site_id", "lake_column_type_changed", "string", "bigint")]),
    (lambda s: s["properties"]["price_micros"].update(type="number"),
     [("price_micros", "lake_column_type_changed", "bigint", "double"),
      ("price_micros", "type_changed", "integer", "number")]),
    # A field a view reads must stay.
    (lambda s: s["properties"].pop("banner_id"), [("banner_id", "field_removed", "string", None)]),
    (lambda s: s.update({"x-key": "site_id"}), [("x-key", "key_field_changed", "user_id", "site_id")]),
])
def test_each_sink_refuses_what_it_cannot_take(edit, expected):
    assert conflicts(changed(edit)) == expected


def test_a_topic_no_sink_reads_takes_any_column_kind():
    assert conflicts(changed(lambda s: s["properties"].update(site_id={"type": "integer"})), "notifications") == []


def test_a_reserved_column_name_is_refused_by_the_lake():
    (found,) = sink_conflicts(PLATFORM, "ad-events", [(1, V1)],
                              changed(lambda s: s["properties"].update(kafka_offset={"type": "integer"})))
    assert found.kind == "reserved_column" and "kafka_offset" in found.message


def test_the_message_names_the_field_both_types_and_the_sink():
    (found,) = sink_conflicts(PLATFORM, "ad-events", [(1, V1)],
                              changed(lambda s: s["properties"].update(site_id={"type": "integer"})))
    assert found.message.startswith("site_id: lake column type changed (was 'string', now 'bigint'): the lake's column")
