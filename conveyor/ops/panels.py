"""Dashboard panels filled by other components through their Prometheus /metrics. Pure.

The interface (docs/ops.md): ``ops.components`` names each component's /metrics URL and
``ops.panels`` names, per panel, the metric families (or globs over them) that fill it. Each label
set of a matching family is one series, shown as its latest value and a sparkline:

- a gauge (or untyped) sample: its value;
- a counter: its rate per second between two scrapes;
- a histogram: its p99 over the interval between two scrapes, from the bucket counts (the
  interpolation of Prometheus' ``histogram_quantile``); over all its observations at the first
  scrape and when read from a file (a finished run's figures, which no scrape adds to);
- a summary: its 0.99 quantile when it exports one.

A panel with ``by`` keeps only those labels and sums the series that differ in the others (a
replicator's lag per partition becomes its lag per route). A gauge of the end of the last complete
hour (``*_complete_until_timestamp_seconds``, the lake's per topic) becomes a strip: the day of hours
up to the scrape's, each 1 when complete and 0 when not, drawn as a heat strip.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
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
    #: For a series of the end of the last complete hour: (hour, 1 complete or 0) per hour, oldest first.
    strip: tuple[tuple[str, float | None], ...] = ()


@dataclass(frozen=True, slots=True)
class PanelView:
    name: str
    title: str
    series: tuple[SeriesView, ...]
    #: Series left out beyond MAX_SERIES.
    more: int
    #: Components whose page could not be read, with the reason.
    down: tuple[tuple[str, str], ...]
    #: Components read from a file (a batch job's last figures), with when it was written (epoch s).
    written: tuple[tuple[str, float], ...] = ()


def unit_of(name: str, kind: str) -> str:
    if name.endswith("_per_second"):  # a configured limit (the throttle's quota), not a counter's rate
        return _UNITS.get(name.removesuffix("_per_second").rsplit("_", 1)[-1], "") + "/s"
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


#: The gauges that make a strip: the end of the last complete hour, unix seconds.
COMPLETE_UNTIL = "_complete_until_timestamp_seconds"
#: Cells per strip: a day of hours.
STRIP_CELLS = 24


def complete_hours(until: float | None, at_ms: int) -> tuple[tuple[str, float | None], ...]:
    """The STRIP_CELLS hours up to the one of ``at_ms`` (its start, UTC), each 1.0 when it ends by
    ``until`` (complete) and 0.0 when not; None throughout when ``until`` is unknown."""
    current = at_ms // 3_600_000 * 3600
    starts = [current - 3600 * back for back in range(STRIP_CELLS - 1, -1, -1)]
    return tuple((datetime.fromtimestamp(start, timezone.utc).strftime("%Y-%m-%dT%H:00Z"),
                  None if until is None else float(start + 3600 <= until)) for start in starts)


def _key(labels: Mapping[str, str], drop: tuple[str, ...] = (), keep: Sequence[str] | None = None) -> Labels:
    return tuple(sorted((k, v) for k, v in labels.items() if k not in drop and (keep is None or k in keep)))


def _add(total: float | None, value: float | None) -> float | None:
    # An unknown part makes the sum unknown: a partial sum would read as a drop in lag.
    return None if total is None or value is None else total + value


def series_values(family: Family, previous: Family | None, seconds: float,
                  keep: Sequence[str] | None = None) -> dict[Labels, float | None]:
    """The value of each series of ``family`` (by label set; with ``keep``, by those labels only,
    summed over the rest); rates and interval quantiles need the family from the previous scrape,
    ``seconds`` earlier."""
    values: dict[Labels, float | None] = {}

    def add(key: Labels, value: float | None) -> None:
        values[key] = _add(values[key], value) if key in values else value

    if family.type in ("gauge", "unknown", "untyped"):
        for name, labels, value in family.samples:
            if name == family.name:
                add(_key(labels, keep=keep), value)
        return values
    if family.type == "summary":
        # Quantiles do not add up: a summary keeps its own label sets.
        return {_key(labels, ("quantile",)): value for name, labels, value in family.samples
                if name == family.name and labels.get("quantile") == "0.99"}
    before = {(name, _key(labels)): value for name, labels, value in previous.samples} if previous else {}
    if family.type == "counter":
        total = family.name + "_total"
        for name, labels, value in family.samples:
            if name == total:
                old = before.get((name, _key(labels)))
                fresh = old is not None and seconds > 0 and value >= old
                add(_key(labels, keep=keep), (value - old) / seconds if fresh and old is not None else None)
        return values
    if family.type == "histogram":
        buckets: dict[Labels, dict[float, float]] = {}
        for name, labels, value in family.samples:
            if name == family.name + "_bucket":
                old = before.get((name, _key(labels))) if previous is not None else 0.0
                delta = value - old if old is not None and value >= old else math.nan
                rows = buckets.setdefault(_key(labels, ("le",), keep), {})
                bound = float(labels["le"])
                rows[bound] = rows.get(bound, 0.0) + delta
        result: dict[Labels, float | None] = {}
        for key, counts in buckets.items():
            ordered = sorted(counts.items())
            result[key] = None if any(math.isnan(c) for _, c in ordered) else histogram_quantile(0.99, ordered)
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
        self._written: dict[str, float] = {}

    def push(self, at_ms: int, pages: Mapping[str, Sequence[Family] | str],
             written: Mapping[str, float] | None = None) -> None:
        """One scrape of every component: its families, or why it could not be read; ``written``:
        when the pages read from files were written."""
        self._down = {c: page for c, page in pages.items() if isinstance(page, str)}
        self._written = dict(written or {})
        for component, page in pages.items():
            if isinstance(page, str):
                continue
            seconds = (at_ms - self._previous_ms[component]) / 1000 if component in self._previous_ms else 0.0
            for family in page:
                if family.name.endswith("_created"):
                    continue  # prometheus_client's creation time of each series: no reading
                panels = [name for name, panel in self.panels.items()
                          if any(fnmatchcase(family.name, pattern) for pattern in panel.metrics)]
                if not panels:
                    continue
                previous = self._previous.get((component, family.name))
                self._previous[(component, family.name)] = family
                if family.type == "histogram" and component in self._written:
                    previous = None  # over the whole run: a file's buckets do not move between reads
                self._units[(component, family.name)] = unit_of(family.name, family.type)
                for panel in panels:
                    values = series_values(family, previous, seconds, self.panels[panel].by)
                    for labels, value in values.items():
                        key = (panel, component, family.name, labels)
                        self._series.setdefault(key, deque(maxlen=self.history)).append((at_ms, value))
            self._previous_ms[component] = at_ms

    def views(self) -> tuple[PanelView, ...]:
        views = []
        for name, panel in self.panels.items():
            series: list[SeriesView] = []
            for key in sorted(k for k in self._series if k[0] == name):
                _, component, metric, labels = key
                points = self._series[key]
                if metric.endswith(COMPLETE_UNTIL):
                    at_ms, until = points[-1]
                    cells = complete_hours(until, at_ms)  # cells of 0 or 1, not seconds: no unit
                    series.append(SeriesView(component, metric, _text(labels), "", cells[-1][1], (), cells))
                else:
                    series.append(SeriesView(component, metric, _text(labels), self._units[(component, metric)],
                                             points[-1][1], tuple(points)))
            # Strips first: a panel's strip is what its title promises (the lake's hours).
            series.sort(key=lambda s: not s.strip)
            views.append(PanelView(name, panel.title, tuple(series[:MAX_SERIES]), max(0, len(series) - MAX_SERIES),
                                   tuple(sorted(self._down.items())), tuple(sorted(self._written.items()))))
        return tuple(views)


def _text(labels: Labels) -> str:
    return ", ".join(f"{k}={v}" for k, v in labels)
