"""The views of a job as plain, picklable values, and the names they give Redis keys. Pure.

Spark ships a task's function with everything it closes over; these frozen dataclasses are what
travels, so a worker never needs the platform file.
"""

from __future__ import annotations

import hashlib
import math
import re
import string
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from functools import cached_property, lru_cache
from typing import Any

from conveyor.config import FieldMatch, Platform, RealtimeView
from conveyor.pipeline.errors import PipelineError

#: Window starts in keys: basic ISO 8601, UTC, without the colons that separate a key's parts.
WINDOW_FORMAT = "%Y%m%dT%H%M%SZ"
#: The hash field holding the batch id that last wrote a key. Fields that start with ``_`` are the
#: job's fences, not counters (a metric's name cannot start with one); readers skip them.
BATCH_FIELD = "_batch"
#: A Redis counter is a signed 64-bit integer (HINCRBY); a view's counters saturate at these bounds.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

Conditions = tuple[tuple[str, frozenset[str]], ...]


class RealtimeConfigError(PipelineError):
    """pipeline.realtime does not name what a job needs (views asked for that do not exist, none at all)."""


def _conditions(match: FieldMatch) -> Conditions:
    return tuple((field, frozenset([want] if isinstance(want, str) else want)) for field, want in sorted(match.items()))


def matches(conditions: Conditions, event: Mapping[str, Any]) -> bool:
    """Values compare as text, so a filter written in YAML matches numbers and strings alike."""
    for field, allowed in conditions:
        value = event.get(field)
        if value is None or str(value) not in allowed:
            return False
    return True


def is_counter(field: str) -> bool:
    """A view hash's field is a counter, not a fence (BATCH_FIELD, the real-time mode's ``_at:...``)."""
    return not field.startswith("_")


def saturate(value: int) -> int:
    """``value`` clamped to what a Redis counter can hold."""
    return INT64_MAX if value > INT64_MAX else INT64_MIN if value < INT64_MIN else value


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MS = timedelta(milliseconds=1)


def epoch_ms(moment: datetime) -> int:
    """Exact milliseconds since the epoch (a float timestamp can round 0.123 s down to 122 ms)."""
    return (moment - _EPOCH) // _MS


@lru_cache(maxsize=4096)
def window_label(start_ms: int) -> str:
    return datetime.fromtimestamp(start_ms / 1000, timezone.utc).strftime(WINDOW_FORMAT)


@dataclass(frozen=True)
class MetricPlan:
    name: str
    #: None counts events; else the integer field added up.
    sum: str | None
    where: Conditions


@dataclass(frozen=True)
class ViewPlan:
    name: str
    topic: str
    filter: Conditions
    group_by: tuple[str, ...]
    key_layout: str
    #: Group-by fields not in the key: their values name the hash fields (``<metric>:<value>``).
    field_parts: tuple[str, ...]
    window_ms: int
    lateness_ms: int
    ttl_seconds: int
    metrics: tuple[MetricPlan, ...]

    @classmethod
    def of(cls, name: str, view: RealtimeView) -> ViewPlan:
        in_key = set(view.key_fields)
        return cls(
            name=name, topic=view.topic, filter=_conditions(view.filter), group_by=tuple(view.group_by),
            key_layout=view.key_layout, field_parts=tuple(g for g in view.group_by if g not in in_key),
            window_ms=round(view.window * 1000), lateness_ms=round(view.allowed_lateness * 1000),
            ttl_seconds=math.ceil(view.ttl),
            metrics=tuple(MetricPlan(m, spec.sum, _conditions(spec.where)) for m, spec in view.metrics.items()),
        )

    def window_start(self, event_ms: int) -> int:
        return event_ms - event_ms % self.window_ms

    @cached_property
    def _key_template(self) -> tuple[str, tuple[str, ...]]:
        """The key layout as a positional format string with the view's name in place, and the
        placeholders its positions stand for: a key is then built without a dict per event."""
        text, names = [], []
        for literal, name, _, _ in string.Formatter().parse(self.key_layout):
            text.append(_braces(literal))
            if name == "view":
                text.append(_braces(self.name))
            elif name is not None:  # the config allows only plain names: view, window_start, group-by fields
                text.append("{}")
                names.append(name)
        return "".join(text), tuple(names)

    def key(self, values: Mapping[str, Any], window_start_ms: int) -> str:
        template, names = self._key_template
        label = window_label(window_start_ms)
        return template.format(*[label if n == "window_start" else values[n] for n in names])

    def key_pattern(self) -> str:
        """A Redis SCAN pattern that matches every key of this view (glob characters of the layout escaped)."""
        layout = re.sub(r"([*?\[\]\\])", r"\\\1", self.key_layout)
        return layout.format_map({**dict.fromkeys(self.group_by, "*"), "view": self.name, "window_start": "*"})

    def field(self, metric: str, values: Mapping[str, Any]) -> str:
        return metric + self.field_suffix(values)

    def field_suffix(self, values: Mapping[str, Any]) -> str:
        """What follows a metric's name in the hash field of the event with these ``values``."""
        return "".join([f":{values[g]}" for g in self.field_parts])


def _braces(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def job_views(platform: Platform, names: list[str] | None = None) -> dict[str, RealtimeView]:
    """The views a job runs: those asked for, else every view of pipeline.realtime."""
    declared = platform.pipeline.realtime.views
    if not declared:
        raise RealtimeConfigError("pipeline.realtime.views is empty in platform.yaml: declare a view first")
    chosen = names or sorted(declared)
    unknown = [n for n in chosen if n not in declared]
    if unknown:
        raise RealtimeConfigError(f"no such view(s): {', '.join(unknown)} (declared: {', '.join(sorted(declared))})")
    return {n: declared[n] for n in sorted(set(chosen))}


def job_id(views: Mapping[str, RealtimeView]) -> str:
    """A job is its set of views: its checkpoint and its Redis state are named after them."""
    joined = "+".join(sorted(views))
    return joined if len(joined) <= 80 else hashlib.sha256(joined.encode()).hexdigest()[:16]
