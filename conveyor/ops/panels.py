"""Dashboard panels filled by other components through their Prometheus /metrics. Pure.

The interface (docs/ops.md): ``ops.components`` names each component's /metrics URL and
``ops.panels`` names, per panel, the metric families (or globs over them) that fill it. Each label
set of a matching family is one series, shown as its latest value and a sparkline:

- a gauge (or untyped) sample: its value;
- a counter: its rate per second between two scrapes;
- a histogram: its p99 over the interval between two scrapes, from the bucket counts (the
  interpolation of Prometheus' ``histogram_quantile``);
- a summary: its 0.99 quantile when it exports one.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase

from conveyor.config import OpsPanel
from conveyor.ops.health import MetricSample

#: Series per panel beyond which the rest are counted, not drawn: a panel must stay readable.
MAX_SERIES = 12
_UNITS = {"seconds": "s", "bytes": "B", "records": "records", "ratio": "ratio", "messages": "messages",
          "events": "events"}

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Family:
    """One metric family of a page: its name (counters without ``_total``), type and samples."""

    name: str
    type: str
    samples: tuple[MetricSample, ...]


@dataclass(frozen=True, slots=True)
class SeriesView:
    component: str
    metric: str
    labels: str
    unit: str
    value: float | None
    #: (epoch ms, value) per scrape, oldest first; None where the value was unknown.
    history: tuple[tuple[int, float | None], ...]


@dataclass(frozen=True, slots=True)
class PanelView:
    name: str
    title: str
    series: tuple[SeriesView, ...]
    #: Series left out beyond MAX_SERIES.
    more: int
    #: Components whose page could not be read, with the reason.
    down: tuple[tuple[str, str], ...]


def unit_of(name: str, kind: str) -> str:
    word = name.rsplit("_", 1)[-1]
    unit = _UNITS.get(word, "")
    if kind == "counter":
        return f"{unit}/s" if unit else "/s"
    return unit


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """The q-quantile from cumulative bucket counts [(upper bound, count)], ascending, +Inf last."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for upper, count in buckets:
        if count >= rank:
            if math.isinf(upper):
                return lower  # beyond the highest finite bucket: its bound is all we know
            if count == below:
                return upper
            return lower + (upper - lower) * (rank - below) / (count - below)
        lower, below = upper, count
    return lower


def _key(labels: Mapping[str, str], drop: tuple[str, ...] = ()) -> Labels:
    return tuple(sorted((k, v) for k, v in labels.items() if k not in drop))


def series_values(family: Family, previous: Family | None, seconds: float) -> dict[Labels, float | None]:
    """The value of each series of ``family`` (by label set); rates and interval quantiles need
    the family from the previous scrape, ``seconds`` earlier."""
    if family.type in ("gauge", "unknown", "untyped"):
        return {_key(labels): value for name, labels, value in family.samples if name == family.name}
    if family.type == "summary":
        return {_key(labels, ("quantile",)): value for name, labels, value in family.samples
                if name == family.name and labels.get("quantile") == "0.99"}
    before = {(name, _key(labels)): value for name, labels, value in previous.samples} if previous else {}
    if family.type == "counter":
        total = family.name + "_total"
        values: dict[Labels, float | None] = {}
        for name, labels, value in family.samples:
            if name == total:
                old = before.get((name, _key(labels)))
                fresh = old is not None and seconds > 0 and value >= old
                values[_key(labels)] = (value - old) / seconds if fresh and old is not None else None
        return values
    if family.type == "histogram":
        buckets: dict[Labels, list[tuple[float, float]]] = {}
        for name, labels, value in family.samples:
            if name == family.name + "_bucket":
                old = before.get((name, _key(labels)))
                delta = value - old if old is not None and value >= old else math.nan
                buckets.setdefault(_key(labels, ("le",)), []).append((float(labels["le"]), delta))
        result: dict[Labels, float | None] = {}
        for key, rows in buckets.items():
            rows.sort()
            result[key] = None if any(math.isnan(c) for _, c in rows) else histogram_quantile(0.99, rows)
        return result
    return {}


class PanelTracker:
    """Keeps each panel series' history across scrapes."""

    def __init__(self, panels: Mapping[str, OpsPanel], history: int = 120) -> None:
        self.panels = dict(panels)
        self.history = history
        self._previous: dict[tuple[str, str], Family] = {}
        self._previous_ms: dict[str, int] = {}
        self._series: dict[tuple[str, str, str, Labels], deque[tuple[int, float | None]]] = {}
        self._units: dict[tuple[str, str], str] = {}
        self._down: dict[str, str] = {}

    def push(self, at_ms: int, pages: Mapping[str, Sequence[Family] | str]) -> None:
        """One scrape of every component: its families, or why it could not be read."""
        self._down = {c: page for c, page in pages.items() if isinstance(page, str)}
        for component, page in pages.items():
            if isinstance(page, str):
                continue
            seconds = (at_ms - self._previous_ms[component]) / 1000 if component in self._previous_ms else 0.0
            for family in page:
                panels = [name for name, panel in self.panels.items()
                          if any(fnmatchcase(family.name, pattern) for pattern in panel.metrics)]
                if not panels:
                    continue
                values = series_values(family, self._previous.get((component, family.name)), seconds)
                self._previous[(component, family.name)] = family
                self._units[(component, family.name)] = unit_of(family.name, family.type)
                for panel in panels:
                    for labels, value in values.items():
                        key = (panel, component, family.name, labels)
                        self._series.setdefault(key, deque(maxlen=self.history)).append((at_ms, value))
            self._previous_ms[component] = at_ms

    def views(self) -> tuple[PanelView, ...]:
        views = []
        for name, panel in self.panels.items():
            keys = sorted(k for k in self._series if k[0] == name)
            series = tuple(
                SeriesView(component, metric, ", ".join(f"{k}={v}" for k, v in labels),
                           self._units[(component, metric)], self._series[key][-1][1], tuple(self._series[key]))
                for key in keys[:MAX_SERIES] for _, component, metric, labels in [key])
            views.append(PanelView(name, panel.title, series, max(0, len(keys) - MAX_SERIES),
                                   tuple(sorted(self._down.items()))))
        return tuple(views)
