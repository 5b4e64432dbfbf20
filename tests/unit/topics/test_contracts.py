"""Contracts are read under draft 2020-12, with 64-bit integers, and refused when they ask for
what the platform cannot enforce."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conveyor.topics.contracts import INT64_MAX, INT64_MIN, ContractError, compile_contract

ROOT = Path(__file__).resolve().parents[3]
SCHEMA = json.loads((ROOT / "contracts/ad-events.schema.json").read_text())
EVENT = {"event_id": "123e4567-e89b-12d3-a456-426614174000", "event_time": "2026-11-21T05:30:00Z",
         "type": "click", "site_id": "s1", "user_id": "u1"}


def contract(**changes):
    return compile_contract("t", {**SCHEMA, **changes})


def with_property(name: str, spec: dict):
    return contract(properties={**SCHEMA["properties"], name: spec})


@pytest.mark.parametrize(("spec", "event", "rule"), [
    # Keywords new in 2019-09/2020-12, which a draft-07 validator ignores.
    ({"type": "object", "dependentRequired": {"a": ["b"]}}, {"a": 1}, "dependentRequired"),
    ({"type": "array", "prefixItems": [{"type": "string"}]}, [1], "type"),
    ({"type": "array", "contains": {"type": "string"}, "maxContains": 1}, ["a", "b"], "maxContains"),
    ({"type": "object", "properties": {"a": {}}, "unevaluatedProperties": False}, {"a": 1, "b": 2},
     "unevaluatedProperties"),
])
def test_draft_2020_12_keywords_are_enforced(spec, event, rule):
    violation = with_property("extra", spec).check({**EVENT, "extra": event})
    assert violation is not None and violation.rule == rule and violation.field.startswith("extra")


@pytest.mark.parametrize(("value", "rule"), [(INT64_MAX + 1, "maximum"), (INT64_MIN - 1, "minimum")])
def test_integers_are_signed_64_bit(value, rule):
    violation = contract().check({**EVENT, "price_micros": value})
    assert (violation.field, violation.rule) == ("price_micros", rule)
    assert contract().check({**EVENT, "price_micros": INT64_MAX}) is None
    # A contract's own, tighter bound stays.
    assert with_property("n", {"type": "integer", "maximum": 5}).check({**EVENT, "n": 6}).rule == "maximum"
    nested = with_property("n", {"type": "array", "items": {"type": ["integer", "null"]}})
    assert nested.check({**EVENT, "n": [1, None, INT64_MAX + 1]}).field == "n.2"


@pytest.mark.parametrize(("changes", "problem"), [
    ({"$schema": "http://json-schema.org/draft-07/schema#"}, "draft 2020-12 only"),
    ({"properties": {**SCHEMA["properties"], "site_id": {"type": "string", "minLenght": 1}}},
     "minLenght not a draft 2020-12 keyword"),
    ({"properties": {**SCHEMA["properties"], "site_id": {"$ref": "https://example.com/site.json"}}},
     "only local references"),
    ({"properties": {**SCHEMA["properties"], "site_id": {"type": "string", "format": "zip-code"}}},
     "Unknown format"),
    ({"properties": {**SCHEMA["properties"], "event_time": {"type": "string"}}}, "must declare event_time"),
    ({"properties": {**SCHEMA["properties"], "site_id": {"type": "strin"}}}, "not a valid draft 2020-12 schema"),
])
def test_a_contract_the_platform_cannot_enforce_is_refused_at_load(changes, problem):
    with pytest.raises(ContractError, match=problem):
        contract(**changes)


def test_extensions_starting_with_x_are_allowed():
    assert with_property("n", {"type": "string", "x-doc": "free text"}).check({**EVENT, "n": "a"}) is None


def test_a_violation_names_the_path_of_a_missing_nested_field():
    nested = with_property("geo", {"type": "object", "required": ["country"]})
    violation = nested.check({**EVENT, "geo": {}})
    assert (violation.field, violation.rule, violation.message) == ("geo.country", "required", "geo.country is required")
