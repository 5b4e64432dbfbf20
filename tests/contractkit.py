"""Hypothesis strategies for events generated from a topic's contract: valid ones, and ones broken
in exactly one way. They read the keywords the platform's contracts use (type, enum, lengths,
bounds, the uuid and date-time formats, required); a contract using others needs them added here.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

from hypothesis import strategies as st

from conveyor.topics.contracts import INT64_MAX, INT64_MIN

_EPOCH = datetime(2000, 1, 1, tzinfo=timezone.utc)
_NOW = datetime.now(timezone.utc).replace(microsecond=0)


def _times(recent: bool) -> st.SearchStrategy[str]:
    """RFC 3339 times, in UTC or with an offset, with or without fractions of a second. ``recent``:
    within the last minute, so windowed views take them as on time."""
    if recent:
        moments = st.integers(-60_000, 0).map(lambda ms: _NOW + timedelta(milliseconds=ms))
    else:
        moments = st.integers(0, 60 * 365 * 24 * 3600).map(lambda s: _EPOCH + timedelta(seconds=s))
    offsets = st.sampled_from([timedelta(0), timedelta(hours=2), timedelta(hours=-5, minutes=-30)])

    def render(moment: datetime, offset: timedelta, fraction: bool, zulu: bool) -> str:
        local = moment.astimezone(timezone(offset))
        text = local.isoformat(timespec="milliseconds" if fraction else "seconds")
        return text.replace("+00:00", "Z") if zulu and offset == timedelta(0) else text

    return st.builds(render, moments, offsets, st.booleans(), st.booleans())


def _text(spec: dict[str, Any]) -> st.SearchStrategy[str]:
    low, high = spec.get("minLength", 0), min(spec.get("maxLength", 80), 80)
    return st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=low, max_size=high)


def _value(name: str, spec: dict[str, Any], recent: bool) -> st.SearchStrategy[Any]:
    if "enum" in spec:
        return st.sampled_from(spec["enum"])
    if spec.get("format") == "uuid":
        return st.uuids().map(str)
    if spec.get("format") == "date-time":
        return _times(recent)
    kind = spec.get("type")
    if kind == "string":
        return _text(spec)
    if kind == "integer":
        return st.integers(max(spec.get("minimum", INT64_MIN), INT64_MIN), min(spec.get("maximum", INT64_MAX), INT64_MAX))
    if kind == "number":
        return st.floats(allow_nan=False, allow_infinity=False)
    if kind == "boolean":
        return st.booleans()
    raise ValueError(f"contractkit cannot generate {name}: {spec}")


def valid_events(schema: dict[str, Any], recent: bool = False) -> st.SearchStrategy[dict[str, Any]]:
    """Events that keep ``schema``: every required field, any subset of the optional ones, a fresh
    event_id each (generated ids would repeat, and a repeat is a retry to the lake)."""
    properties, required = schema["properties"], set(schema["required"])
    optional = sorted(set(properties) - required)

    @st.composite
    def event(draw: st.DrawFn) -> dict[str, Any]:
        chosen = [*sorted(required), *draw(st.lists(st.sampled_from(optional), unique=True) if optional else st.just([]))]
        drawn = {name: draw(_value(name, properties[name], recent)) for name in chosen}
        return {**drawn, "event_id": str(uuid.uuid4())}

    return event()


def _break(schema: dict[str, Any], name: str, how: str) -> Any:
    """A value of property ``name`` that breaks its spec in the way ``how`` names, or None when the
    spec has no such rule."""
    spec = schema["properties"][name]
    if how == "type":
        return 12345 if spec.get("type") == "string" or "enum" in spec else "not-a-number"
    if how == "enum" and "enum" in spec:
        return "-".join(spec["enum"]) + "-not-one"
    if how == "maxLength" and "maxLength" in spec:
        return "x" * (spec["maxLength"] + 1)
    if how == "minLength" and spec.get("minLength", 0) > 0:
        return ""
    if how == "maximum" and spec.get("type") == "integer":
        return min(spec.get("maximum", INT64_MAX), INT64_MAX) + 1
    if how == "minimum" and spec.get("type") == "integer":
        return max(spec.get("minimum", INT64_MIN), INT64_MIN) - 1
    if how == "format" and spec.get("format") == "uuid":
        return "not-a-uuid"
    if how == "format" and spec.get("format") == "date-time":
        return "2026-13-01T00:00:00Z"
    return None


MUTATIONS = ("required", "type", "enum", "maxLength", "minLength", "maximum", "minimum", "format")


def broken_events(schema: dict[str, Any]) -> st.SearchStrategy[tuple[dict[str, Any], str, str]]:
    """``(event, field, rule)``: a valid event with one field broken by one rule of its contract."""
    names = sorted(schema["properties"])

    @st.composite
    def broken(draw: st.DrawFn) -> tuple[dict[str, Any], str, str]:
        event = draw(valid_events(schema))
        how = draw(st.sampled_from(MUTATIONS))
        if how == "required":
            name = draw(st.sampled_from(sorted(set(schema["required"]) - {"event_id"})))
            del event[name]
            return event, name, how
        candidates = [n for n in names if n != "event_id" and _break(schema, n, how) is not None]
        if not candidates:  # this contract has no such rule: break a type instead
            how, candidates = "type", [n for n in names if n != "event_id"]
        name = draw(st.sampled_from(candidates))
        event[name] = _break(schema, name, how)
        return event, name, how

    return broken()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
