"""The dashboard's panels: PromQL per panel, asked of Prometheus, shaped into lines to draw.

The interface (docs/ops.md, "Panels"): a component serves /metrics and is listed under
``ops.components``; Prometheus scrapes it; a panel is a title and PromQL ``queries``, each
series of an answer one line (a sparkline over ``ops.panel_range`` and its latest value), or, for
a query marked ``strip``, a day's strip of hours complete or not. Rates, quantiles and sums are
Prometheus's own: nothing here computes them. The expressions shared with the Grafana dashboards
come from conveyor.ops.grafana, so the two cannot drift apart.

Shaping is pure (:func:`panel_view`); :func:`read_panels` asks a client for each query.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from conveyor.config import OpsPanel, PanelQuery
from conveyor.ops import grafana
from conveyor.ops.prometheus import NO_PROMETHEUS, PrometheusClient, QueryError, Series

#: Series per panel beyond which the rest are counted, not drawn: a panel must stay readable.
MAX_SERIES = 12
#: Cells per strip: a day of hours.
STRIP_CELLS = 24
#: Grafana's unit ids, as the page writes them after a value.
_UNITS = {"s": "s", "Bps": "B/s", "ops": "/s", "reqps": "req/s", "percentunit": "ratio", "short": "", "bool": ""}
#: The answer of a panel without a Prometheus to ask.


def from_grafana(*panels: grafana.Panel) -> list[PanelQuery]:
    """The Grafana panels' expressions as panel queries, each line named after its Grafana panel
    (several share a watcher panel)."""
    return [PanelQuery(expr=expr, legend=f"{panel.title}: {legend}", unit=_UNITS.get(panel.unit, panel.unit))
            for panel in panels for expr, legend in panel.targets]


def _quantile_of_run(q: float, bucket: str) -> PanelQuery:
    # Over the last 5 minutes; with nothing observed in them (a finished run, whose file keeps its
    # buckets unchanged: NaN, which ">= 0" drops), over every observation of the run.
    return PanelQuery(expr=f"(histogram_quantile({q}, sum by (le) (rate({bucket}[5m]))) >= 0) "
                           f"or histogram_quantile({q}, sum by (le) ({bucket}))",
                      legend=f"p{round(q * 100)} (5m; else the last run's)", unit="s")


DEFAULT_PANELS: dict[str, OpsPanel] = {
    "gateway": OpsPanel(title="Gateway: events accepted and request time",
                        queries=from_grafana(grafana.GATEWAY_ACCEPTED, grafana.GATEWAY_P99)),
    "replication": OpsPanel(title="Replication lag and latency per route",
                            queries=from_grafana(grafana.REPLICATION_WAITING, grafana.REPLICATION_P99)),
    # The lake's --once runs leave their counts in a file that no run changes until the next: the
    # totals, not rates (a rate of a file's counters is 0).
    "lake": OpsPanel(title="Lake completeness per hour, rows landed, gaps", queries=[
        PanelQuery(expr="max by (topic) (conveyor_lake_complete_until_timestamp_seconds)", legend="{{topic}}",
                   strip=True),
        PanelQuery(expr="sum by (topic) (conveyor_lake_rows_landed_total)", legend="Rows landed: {{topic}}",
                   unit="rows"),
        PanelQuery(expr="sum by (topic) (conveyor_lake_gaps_total)", legend="Gaps: {{topic}}"),
        *from_grafana(grafana.LAKE_LOST)]),
    "dispatch": OpsPanel(title="Dispatcher backlog", queries=from_grafana(grafana.DISPATCH_BACKLOG)),
    "realtime": OpsPanel(title="Real-time view latency", queries=[
        _quantile_of_run(q, "conveyor_realtime_latency_seconds_bucket") for q in (0.5, 0.99)]),
    "hosts": OpsPanel(title="Broker hosts: network, disks, filesystems", queries=from_grafana(
        grafana.HOST_NETWORK_BYTES, grafana.HOST_DISK_BUSY, grafana.HOST_FILESYSTEM_USED)),
    "throttle": OpsPanel(title="Throttled consumers and busy brokers", queries=[
        PanelQuery(expr="conveyor_throttle_quota_bytes_per_second", legend="Quota: {{cluster}} {{client_id}}",
                   unit="B/s"),
        PanelQuery(expr="conveyor_throttle_broker_busy", legend="Busy: {{cluster}} broker {{broker}}"),
        PanelQuery(expr="sum by (cluster, action) (rate(conveyor_throttle_decisions_total[5m]))",
                   legend="Decisions: {{cluster}} {{action}}", unit="/s")]),
}


@dataclass(frozen=True, slots=True)
class SeriesView:
    name: str
    unit: str
    #: The latest known value, and when it was (epoch ms); None before any.
    value: float | None
    at_ms: int | None
    #: (epoch ms, value) per step, oldest first; None where Prometheus had no value.
    history: tuple[tuple[int, float | None], ...]
    #: For a strip: (hour, 1 complete or 0) per hour, oldest first.
    strip: tuple[tuple[str, float | None], ...] = ()


@dataclass(frozen=True, slots=True)
class PanelView:
    name: str
    title: str
    series: tuple[SeriesView, ...]
    #: Series left out beyond MAX_SERIES.
    more: int
    #: Why queries of the panel gave no answer, one line each.
    errors: tuple[str, ...] = ()


#: The part of ``ops.running`` whose figures each default panel shows; the hosts' panel is every
#: platform's.
PANEL_PARTS = {"gateway": "gateway", "replication": "replicator", "lake": "lake", "dispatch": "dispatcher",
               "realtime": "views", "throttle": "throttle"}


def panels_of(configured: Mapping[str, OpsPanel] | None, running: Collection[str]) -> dict[str, OpsPanel]:
    """The panels platform.yaml sets, or else the default panels of the parts it keeps running
    (``ops.running``): a part it does not run has no figures to show."""
    if configured is not None:
        return dict(configured)
    return {name: panel for name, panel in DEFAULT_PANELS.items()
            if name not in PANEL_PARTS or PANEL_PARTS[name] in running}


_LEGEND = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def legend(text: str, labels: Mapping[str, str]) -> str:
    """A line's name from a legend format (``{{route}}``, as Prometheus and Grafana write it); with
    none, the series' labels."""
    if not text:
        shown = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__")
        return f"{labels.get('__name__', '')}{{{shown}}}"
    return " ".join(_LEGEND.sub(lambda m: labels.get(m[1], ""), text).split())


def complete_hours(until: float | None, at_ms: int) -> tuple[tuple[str, float | None], ...]:
    """The STRIP_CELLS hours up to the one of ``at_ms`` (its start, UTC), each 1.0 when it ends by
    ``until`` (complete) and 0.0 when not; None throughout when ``until`` is unknown."""
    current = at_ms // 3_600_000 * 3600
    starts = [current - 3600 * back for back in range(STRIP_CELLS - 1, -1, -1)]
    return tuple((datetime.fromtimestamp(start, timezone.utc).strftime("%Y-%m-%dT%H:00Z"),
                  None if until is None else float(start + 3600 <= until)) for start in starts)


@dataclass(frozen=True, slots=True)
class Steps:
    """The times a range query is evaluated at: ``count`` steps of ``step_ms`` ending at ``end_ms``."""

    end_ms: int
    step_ms: int
    count: int

    @property
    def start_ms(self) -> int:
        return self.end_ms - self.step_ms * (self.count - 1)

    @staticmethod
    def over(end_ms: int, span: float, points: int) -> Steps:
        """``points`` steps over the ``span`` seconds up to ``end_ms``, whole milliseconds apart (so
        the times Prometheus answers with are these exactly), at least a second apart."""
        count = max(2, points)
        return Steps(end_ms, max(1000, round(span * 1000 / (count - 1))), count)

    def grid(self, points: Sequence[tuple[int, float | None]]) -> tuple[tuple[int, float | None], ...]:
        """``points`` on every step, None where Prometheus had none (it leaves those steps out):
        every line of a panel spans the same time, and a stopped one shows where it stopped."""
        values: list[float | None] = [None] * self.count
        for at, value in points:
            index = round((at - self.start_ms) / self.step_ms)
            if 0 <= index < self.count:
                values[index] = value
        return tuple((self.start_ms + i * self.step_ms, v) for i, v in enumerate(values))


def _series_view(query: PanelQuery, series: Series, steps: Steps) -> SeriesView:
    known = [(at, v) for at, v in series.points if v is not None]
    at, value = known[-1] if known else (None, None)
    name = legend(query.legend, series.labels)
    if query.strip:
        cells = complete_hours(value, steps.end_ms)  # cells of 0 or 1, not seconds: no unit
        return SeriesView(name, "", cells[-1][1], at, (), cells)
    return SeriesView(name, query.unit, value, at, steps.grid(series.points))


def panel_view(name: str, panel: OpsPanel, answers: Sequence[tuple[Series, ...] | str], steps: Steps) -> PanelView:
    """The panel from each of its queries' answers (in the order of ``panel.queries``): the series,
    or why the query gave none."""
    series = [_series_view(query, found, steps) for query, answer in zip(panel.queries, answers)
              if not isinstance(answer, str) for found in answer]
    # Strips first: a panel's strip is what its title promises (the lake's hours).
    series.sort(key=lambda s: (not s.strip, s.name))
    errors = tuple(dict.fromkeys(answer for answer in answers if isinstance(answer, str)))
    return PanelView(name, panel.title, tuple(series[:MAX_SERIES]), max(0, len(series) - MAX_SERIES), errors)


def read_panels(client: PrometheusClient | None, panels: Mapping[str, OpsPanel], at_ms: int, span: float,
                points: int) -> tuple[PanelView, ...]:
    """Every panel over the ``span`` seconds up to ``at_ms``, in ``points`` steps. A query that fails
    fails its panel's line only; once Prometheus does not answer, the rest are not asked (each
    would wait out the timeout) and say so."""
    steps = Steps.over(at_ms, span, points)
    if client is None:
        return tuple(panel_view(name, panel, [NO_PROMETHEUS] * len(panel.queries), steps)
                     for name, panel in panels.items())
    down: str | None = None

    def ask(query: PanelQuery) -> tuple[Series, ...] | str:
        nonlocal down
        if down is not None:
            return down
        try:
            return client.query_range(query.expr, steps.start_ms / 1000, steps.end_ms / 1000, steps.step_ms / 1000)
        except QueryError as err:
            failed = f"Prometheus query failed: {err}"
            if err.unreachable:
                down = failed
                return failed
            return f"{failed} (in {query.expr})"

    return tuple(panel_view(name, panel, [ask(query) for query in panel.queries], steps)
                 for name, panel in panels.items())
