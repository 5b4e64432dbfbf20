"""Contract compatibility: each rule against a table of changes it allows and refuses, and the
property that makes the rules worth having: an event valid under an old version is valid under a
BACKWARD-compatible new one, and an event valid under a new version is valid under the old one it
is FORWARD-compatible with."""

from __future__ import annotations

import copy
from typing import Any

import jsonschema_rs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conveyor.config import Compatibility as Rule
from conveyor.topics.compatibility import check

BASE: dict[str, Any] = {
    "type": "object",
    "required": ["event_id", "site_id"],
    "properties": {
        "event_id": {"type": "string", "format": "uuid"},
        "site_id": {"type": "string", "maxLength": 64},
        "type": {"enum": ["page_view", "click"]},
        "price": {"type": "integer", "minimum": 0},
    },
}
CLOSED = {**BASE, "additionalProperties": False}


def changed(base: dict[str, Any], **edits: Any) -> dict[str, Any]:
    """``base`` with properties set (a dict), removed (None), or top-level keys replaced (``_key``)."""
    schema = copy.deepcopy(base)
    for name, value in edits.items():
        if name.startswith("_"):
            schema[name[1:]] = value
        elif value is None:
            del schema["properties"][name]
        else:
            schema["properties"][name] = value
    return schema


# (what changes, old, new, BACKWARD allows it, FORWARD allows it, the field and kind BACKWARD names)
CHANGES = [
    ("nothing", BASE, BASE, True, True, None),
    ("a description", BASE, {**BASE, "description": "ads"}, True, True, None),
    ("string to integer", BASE, changed(BASE, site_id={"type": "integer"}), False, False, ("site_id", "type_narrowed")),
    ("integer widened to number", BASE, changed(BASE, price={"type": "number", "minimum": 0}), True, False, None),
    ("a type added to a union", BASE, changed(BASE, site_id={"type": ["string", "null"], "maxLength": 64}),
     True, False, None),
    ("an enum value added", BASE, changed(BASE, type={"enum": ["page_view", "click", "impression"]}), True, False,
     None),
    ("an enum value removed", BASE, changed(BASE, type={"enum": ["page_view"]}), False, True,
     ("type", "enum_narrowed")),
    ("maxLength raised", BASE, changed(BASE, site_id={"type": "string", "maxLength": 128}), True, False, None),
    ("maxLength lowered", BASE, changed(BASE, site_id={"type": "string", "maxLength": 8}), False, True,
     ("site_id", "max_length_lowered")),
    ("a minimum raised", BASE, changed(BASE, price={"type": "integer", "minimum": 10}), False, True,
     ("price", "minimum_raised")),
    ("an exclusive minimum at the same value", BASE, changed(BASE, price={"type": "integer", "exclusiveMinimum": 0}),
     False, True, ("price", "minimum_raised")),
    ("a pattern added", BASE, changed(BASE, site_id={"type": "string", "maxLength": 64, "pattern": "^s"}), False, True,
     ("site_id", "pattern_changed")),
    ("a field made required", BASE, {**BASE, "required": ["event_id", "site_id", "price"]}, False, True,
     ("price", "required_added")),
    ("a required field made optional", BASE, {**BASE, "required": ["event_id"]}, True, False, None),
    # The open content model: old events may carry any other field with any value.
    ("an optional field added to an open model", BASE, changed(BASE, country={"type": "string"}), False, True,
     ("country", "property_added_to_open_model")),
    ("an unconstrained field added to an open model", BASE, changed(BASE, note={}), True, True, None),
    ("a field removed from an open model", BASE, changed(BASE, price=None), True, False, None),
    # The closed content model: no other field is ever sent.
    ("an optional field added to a closed model", CLOSED, changed(CLOSED, country={"type": "string"}), True, False,
     None),
    ("a required field added to a closed model", CLOSED,
     {**changed(CLOSED, country={"type": "string"}), "required": ["event_id", "site_id", "country"]}, False, False,
     ("country", "required_added")),
    ("a field removed from a closed model", CLOSED, changed(CLOSED, price=None), False, True,
     ("price", "property_removed_from_closed_model")),
    ("an open model closed", BASE, CLOSED, False, True, ("(event)", "content_model_closed")),
    ("a closed model opened", CLOSED, BASE, True, False, None),
    ("a combinator added", BASE, {**BASE, "anyOf": [{"required": ["type"]}, {"required": ["price"]}]}, False, False,
     ("(event)", "anyOf_changed")),
    ("a nested field narrowed", changed(BASE, geo={"type": "object", "properties": {"lat": {"type": "number"}}}),
     changed(BASE, geo={"type": "object", "properties": {"lat": {"type": "integer"}}}), False, True,
     ("geo.lat", "type_narrowed")),
    ("array items narrowed", changed(BASE, tags={"type": "array", "items": {"type": "string"}}),
     changed(BASE, tags={"type": "array", "items": {"type": "string", "maxLength": 3}}), False, True,
     ("tags[]", "max_length_lowered")),
]


@pytest.mark.parametrize(("what", "old", "new", "backward", "forward", "named"), CHANGES, ids=[c[0] for c in CHANGES])
def test_each_rule_allows_and_refuses_its_changes(what, old, new, backward, forward, named):
    found_backward = check(Rule.BACKWARD, new, [(1, old)])
    assert (not found_backward) is backward, found_backward
    assert (not check(Rule.FORWARD, new, [(1, old)])) is forward
    assert (not check(Rule.FULL, new, [(1, old)])) is (backward and forward)
    assert check(Rule.NONE, new, [(1, old)]) == []
    if named is not None:
        assert (named[0], named[1]) in {(i.field, i.kind) for i in found_backward}, found_backward


def test_an_incompatibility_names_the_field_the_old_and_new_types_and_the_version():
    [found] = check(Rule.BACKWARD, changed(BASE, site_id={"type": "integer"}), [(1, BASE), (2, BASE)])
    assert (found.field, found.kind, found.old, found.new, found.version) == ("site_id", "type_narrowed", "string",
                                                                               "integer", 2)
    assert found.message.startswith("site_id: type narrowed (was 'string', now 'integer')")


def test_transitive_rules_check_every_version_the_others_the_latest_only():
    v1 = changed(BASE, price={"type": "integer"})
    v2 = changed(BASE, price={"type": "integer", "minimum": 0})
    v3 = changed(BASE, price={"type": "integer", "minimum": 0, "maximum": 100})  # narrower than v1 and v2
    back_to_v2 = changed(BASE, price={"type": "integer", "minimum": 0})
    assert check(Rule.FORWARD, back_to_v2, [(1, v1), (2, v2)]) == []
    assert check(Rule.BACKWARD, v3, [(1, v1), (2, v2)]) != []
    v2_wide = changed(BASE, price={"type": "number"})
    # v1 integer, v2 number: a new integer version reads v2's numbers? no; v1's integers? yes.
    assert [i.version for i in check(Rule.BACKWARD_TRANSITIVE, v1, [(1, v1), (2, v2_wide)])] == [2]
    assert check(Rule.BACKWARD, v1, [(1, v2_wide), (2, v1)]) == []
    assert [i.version for i in check(Rule.BACKWARD_TRANSITIVE, v1, [(1, v2_wide), (2, v1)])] == [1]
    assert check(Rule.FULL_TRANSITIVE, v1, [(1, v1)]) == []


def test_a_true_and_false_enum_is_not_one_and_zero():
    old = changed(BASE, flag={"enum": [1, 0]})
    assert check(Rule.BACKWARD, changed(BASE, flag={"enum": [True, False]}), [(1, old)]) != []
    assert check(Rule.BACKWARD, changed(BASE, flag={"enum": [1.0, 0]}), [(1, old)]) == []


# -- the property ---------------------------------------------------------------------------------

NAMES = ("a", "b", "c")
FIELD_SCHEMAS = st.one_of(
    st.just({}),
    st.fixed_dictionaries({"type": st.sampled_from(["string", "integer", "number", "boolean", "null",
                                                    ["string", "null"], ["integer", "string"]])},
                          optional={"minLength": st.integers(0, 3), "maxLength": st.integers(1, 5),
                                    "minimum": st.integers(-5, 5), "maximum": st.integers(-5, 5),
                                    "exclusiveMinimum": st.integers(-5, 5), "multipleOf": st.sampled_from([1, 2, 3])}),
    st.fixed_dictionaries({"enum": st.lists(st.sampled_from(["x", "y", 1, 2, True, None]), min_size=1, max_size=4,
                                            unique_by=lambda v: (type(v), v))}),
)
SCHEMAS = st.fixed_dictionaries(
    {"type": st.just("object"),
     "properties": st.dictionaries(st.sampled_from(NAMES), FIELD_SCHEMAS, max_size=3),
     "required": st.lists(st.sampled_from(NAMES), max_size=2, unique=True)},
    optional={"additionalProperties": st.booleans()},
)
VALUES = st.one_of(st.none(), st.booleans(), st.integers(-6, 6), st.sampled_from([0.5, 2.0, -1.5]),
                   st.text(alphabet="xyz", max_size=6), st.text(alphabet="xy", max_size=3))
EVENTS = st.dictionaries(st.sampled_from(NAMES), VALUES, max_size=3)


_BY_TYPE = {"string": st.text(alphabet="xy", max_size=5), "integer": st.integers(-6, 6),
            "number": st.one_of(st.integers(-6, 6), st.sampled_from([0.5, 2.0, -1.5])), "boolean": st.booleans(),
            "null": st.none()}


def value_for(field: Any) -> st.SearchStrategy[Any]:
    """Values a field's schema is likely to take: of its types, from its enum, or anything."""
    if isinstance(field, dict) and "enum" in field:
        return st.sampled_from(field["enum"])
    declared = field.get("type") if isinstance(field, dict) else None
    if declared is None:
        return VALUES
    return st.one_of(*(_BY_TYPE[t] for t in ([declared] if isinstance(declared, str) else declared)))


def events_near(schema: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Events mostly valid under ``schema``: its fields with values of their types, now and then one
    missing or another field added."""
    fields = {name: value_for(field) for name, field in schema["properties"].items()}
    required = {name: fields.pop(name) for name in schema["required"] if name in fields}
    return st.fixed_dictionaries(required, optional=fields).flatmap(
        lambda event: st.one_of(st.just(event), EVENTS.map(lambda extra: {**extra, **event})))


def valid(schema: dict[str, Any], event: dict[str, Any]) -> bool:
    return jsonschema_rs.Draft202012Validator(schema).is_valid(event)


def mutated(data: st.DataObject, schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` after one to three random edits: a field's schema replaced, or one keyword of it
    changed, a field added or removed, ``required`` or the content model changed. Near neighbours
    are where a wrong rule hides."""
    new = copy.deepcopy(schema)
    for _ in range(data.draw(st.integers(1, 3))):
        edit = data.draw(st.sampled_from(["replace", "tweak", "tweak", "tweak", "remove", "required", "model"]))
        name = data.draw(st.sampled_from(NAMES))
        properties = new["properties"]
        if edit == "replace":
            properties[name] = data.draw(FIELD_SCHEMAS)
        elif edit == "tweak" and isinstance(properties.get(name), dict) and "type" in properties[name]:
            keyword = data.draw(st.sampled_from(["minLength", "maxLength", "type"] if "string" in properties[name]["type"]
                                                else ["minimum", "maximum", "exclusiveMinimum", "multipleOf", "type"]))
            values = {"type": st.sampled_from(["string", "integer", "number", ["string", "null"]]),
                      "multipleOf": st.integers(1, 3), "minLength": st.integers(0, 4), "maxLength": st.integers(0, 4)}
            properties[name][keyword] = data.draw(values.get(keyword, st.integers(-3, 4)))
        elif edit == "remove":
            properties.pop(name, None)
        elif edit == "required":
            new["required"] = data.draw(st.lists(st.sampled_from(NAMES), max_size=2, unique=True))
        elif edit == "model":
            new["additionalProperties"] = data.draw(st.booleans())
    return new


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(SCHEMAS, st.data())
def test_what_a_compatible_version_reads(old, data):
    new = mutated(data, old)
    events = data.draw(st.lists(st.one_of(events_near(old), events_near(new)), min_size=1, max_size=20))
    if not check(Rule.BACKWARD, new, [(1, old)]):
        for event in events:
            if valid(old, event):
                assert valid(new, event), (old, new, event)
    if not check(Rule.FORWARD, new, [(1, old)]):
        for event in events:
            if valid(new, event):
                assert valid(old, event), (old, new, event)
