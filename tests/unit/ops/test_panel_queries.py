"""The dashboard's panels asked of Prometheus: its API's answers (recorded as Prometheus 2.42 writes
them) shaped into lines, failures into a line on the panel, and the default panels' PromQL over
the metrics the platform exports (no servers)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
import yaml

from conveyor.config import OpsPanel, PanelQuery
from conveyor.ops import grafana
from conveyor.ops.dashboard import (DEFAULT_PANELS, MAX_SERIES, NO_PROMETHEUS, STRIP_CELLS, Steps, complete_hours,
                                    legend, panel_view, panels_of, read_panels)
from conveyor.ops.prometheus import PrometheusClient, QueryError, Series, parse_range
from tests.metricskit import NODE_EXPORTER_LABELS, exported_label_names
from tests.unit.ops.test_grafana import _METRIC, _labels_used

needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool comes with `make setup`")
#: 2026-05-01T14:00Z and 12:00Z.
TWO_PM, NOON = 1777644000, 1777636800
STEPS = Steps.over(TWO_PM * 1000, 60, 3)  # 13:59:00, 13:59:30, 14:00:00


def matrix(*series: tuple[dict[str, str], list[tuple[float, str]]]) -> dict:
    return {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": labels, "values": [[at, value] for at, value in values]} for labels, values in series]}}


#: /api/v1/query_range of the replication panel's p99: one route with a step of no observations
#: (NaN) and one left out (Prometheus omits the steps where a series has no sample).
P99 = matrix(({"route": "dc1-central"}, [(TWO_PM - 60, "0.0991"), (TWO_PM - 30, "NaN"), (TWO_PM, "0.25")]),
             ({"route": "dc2-central"}, [(TWO_PM - 60, "+Inf"), (TWO_PM - 30, "1.5")]))
BAD = {"status": "error", "errorType": "bad_data",
       "error": 'invalid parameter "query": 1:5: parse error: unexpected identifier "by"'}


def test_a_range_answer_is_its_series_with_nan_and_infinity_unknown():
    first, second = parse_range(P99)
    assert first == Series({"route": "dc1-central"}, (((TWO_PM - 60) * 1000, 0.0991), ((TWO_PM - 30) * 1000, None),
                                                      (TWO_PM * 1000, 0.25)))
    assert second.points == (((TWO_PM - 60) * 1000, None), ((TWO_PM - 30) * 1000, 1.5))


@pytest.mark.parametrize("body, message", [
    pytest.param(BAD, "bad_data: invalid parameter", id="refused"),
    pytest.param({"status": "success", "data": {"resultType": "vector", "result": []}}, "got 'vector'", id="vector"),
    pytest.param({"status": "success", "data": {"resultType": "matrix", "result": [{"values": []}]}},
                 "a series is malformed", id="malformed"),
    pytest.param(["not", "an", "object"], "not a JSON object", id="not-the-api"),
])
def test_an_answer_that_is_no_range_is_a_query_error(body, message):
    with pytest.raises(QueryError, match=message) as caught:
        parse_range(body)
    assert not caught.value.unreachable


def test_the_client_asks_query_range_and_says_what_answered_instead():
    asked: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(request)
        if request.url.params["query"] == "up":
            return httpx.Response(200, json=matrix(({"job": "x"}, [(TWO_PM, "1")])))
        if request.url.params["query"] == "broken(":
            return httpx.Response(400, json=BAD)
        return httpx.Response(502, text="<html>bad gateway</html>")

    client = PrometheusClient("http://prometheus.example:9090/")
    client._client = httpx.Client(transport=httpx.MockTransport(answer))  # noqa: SLF001 (no server in a unit test)
    try:
        assert client.query_range("up", TWO_PM - 60, TWO_PM, 30)[0].points == ((TWO_PM * 1000, 1.0),)
        assert asked[0].url.path == "/api/v1/query_range"
        assert dict(asked[0].url.params) == {"query": "up", "start": f"{TWO_PM - 60}.000", "end": f"{TWO_PM}.000",
                                             "step": "30.000"}
        with pytest.raises(QueryError, match="bad_data"):
            client.query_range("broken(", TWO_PM - 60, TWO_PM, 30)
        with pytest.raises(QueryError, match="answered HTTP 502 without its API's JSON"):
            client.query_range("other", TWO_PM - 60, TWO_PM, 30)
    finally:
        client.close()


def test_an_unreachable_prometheus_is_an_unreachable_query_error():
    client = PrometheusClient("http://127.0.0.1:9", timeout=2)  # the discard port: nothing listens
    try:
        with pytest.raises(QueryError, match="did not answer") as caught:
            client.query_range("up", TWO_PM - 60, TWO_PM, 30)
    finally:
        client.close()
    assert caught.value.unreachable


@pytest.mark.parametrize("text, labels, name", [
    pytest.param("{{route}}", {"route": "dc1-central"}, "dc1-central", id="a-label"),
    pytest.param("Disk busy: {{instance}} {{ device }}", {"instance": "localhost"}, "Disk busy: localhost",
                 id="a-missing-label"),
    pytest.param("", {"__name__": "up", "job": "x", "instance": "a"}, 'up{instance="a", job="x"}', id="no-legend"),
])
def test_a_line_is_named_by_its_legend(text, labels, name):
    assert legend(text, labels) == name


def test_steps_are_whole_milliseconds_and_every_line_spans_them_all():
    steps = Steps.over(TWO_PM * 1000, 3600, 120)
    assert steps.step_ms == 30252 and steps.start_ms == TWO_PM * 1000 - 30252 * 119
    assert Steps.over(TWO_PM * 1000, 10, 120).step_ms == 1000  # not finer than a second
    line = STEPS.grid([((TWO_PM - 30) * 1000, 2.0)])
    assert line == (((TWO_PM - 60) * 1000, None), ((TWO_PM - 30) * 1000, 2.0), (TWO_PM * 1000, None))


REPLICATION = OpsPanel(title="Replication", queries=[PanelQuery(expr="p99", legend="p99: {{route}}", unit="s")])


def test_a_panel_is_its_lines_with_the_latest_known_value_and_when_it_was():
    view = panel_view("replication", REPLICATION, [parse_range(P99)], STEPS)
    first, second = view.series
    assert (first.name, first.unit, first.value, first.at_ms) == ("p99: dc1-central", "s", 0.25, TWO_PM * 1000)
    assert [v for _, v in first.history] == [0.0991, None, 0.25]
    # Stopped before the last step: its last value, with its time (the page says "at 13:59:30").
    assert (second.value, second.at_ms) == (1.5, (TWO_PM - 30) * 1000)
    assert [v for _, v in second.history] == [None, 1.5, None] and view.errors == ()


def test_a_failed_query_is_a_line_on_its_panel_and_the_others_still_draw():
    panel = OpsPanel(title="Two", queries=[*REPLICATION.queries, PanelQuery(expr="broken(")])
    view = panel_view("two", panel, [parse_range(P99), "Prometheus query failed: bad_data: ... (in broken()"], STEPS)
    assert len(view.series) == 2 and view.errors == ("Prometheus query failed: bad_data: ... (in broken()",)


def test_a_panel_shows_at_most_max_series():
    many = matrix(*(({"topic": f"t{i:02}"}, [(TWO_PM, str(i))]) for i in range(MAX_SERIES + 5)))
    panel = OpsPanel(title="Lake", queries=[PanelQuery(expr="x", legend="{{topic}}")])
    view = panel_view("lake", panel, [parse_range(many)], STEPS)
    assert len(view.series) == MAX_SERIES and view.more == 5 and view.series[0].name == "t00"


def test_the_end_of_the_last_complete_hour_makes_a_strip_of_the_day_up_to_now():
    cells = complete_hours(NOON, (TWO_PM + 1800) * 1000)
    assert len(cells) == STRIP_CELLS and cells[0][0] == "2026-04-30T15:00Z" and cells[-1][0] == "2026-05-01T14:00Z"
    assert [v for _, v in cells[-4:]] == [1.0, 0.0, 0.0, 0.0]  # 11:00 ends at noon; 12:00, 13:00 and 14:00 do not
    assert {v for _, v in complete_hours(None, TWO_PM * 1000)} == {None}


def test_a_strip_query_draws_each_series_latest_value_as_hours_first_in_its_panel():
    lake = DEFAULT_PANELS["lake"]
    answers: list = [()] * len(lake.queries)
    answers[0] = parse_range(matrix(({"topic": "ad-events"}, [(TWO_PM - 60, str(NOON - 3600)), (TWO_PM, str(NOON))])))
    answers[1] = parse_range(matrix(({"topic": "ad-events"}, [(TWO_PM, "20")])))
    view = panel_view("lake", lake, answers, STEPS)
    strip, landed = view.series
    assert strip.name == "ad-events" and strip.history == () and strip.unit == ""
    assert [v for _, v in strip.strip[-4:]] == [1.0, 0.0, 0.0, 0.0]
    assert (landed.name, landed.value, landed.unit) == ("Rows landed: ad-events", 20.0, "rows")


class FakePrometheus:
    """Answers each expression from a table; an expression not in it is refused, and ``down`` makes
    every query unreachable."""

    def __init__(self, answers: dict[str, tuple[Series, ...]], down: bool = False) -> None:
        self.answers, self.down, self.asked = answers, down, []

    def query_range(self, expr: str, start: float, end: float, step: float) -> tuple[Series, ...]:
        self.asked.append((expr, start, end, step))
        if self.down:
            raise QueryError("Prometheus at http://127.0.0.1:9 did not answer (ConnectError: refused)", True)
        if expr not in self.answers:
            raise QueryError("bad_data: parse error")
        return self.answers[expr]


def test_read_panels_asks_each_query_over_the_range_and_fails_only_the_refused_one():
    gateway = DEFAULT_PANELS["gateway"]
    accepted, p99 = (q.expr for q in gateway.queries)
    fake = FakePrometheus({accepted: parse_range(matrix(({"instance": "gateway-dc1", "cluster": "dc1"},
                                                         [(TWO_PM, "2000")])))})
    (view,) = read_panels(fake, {"gateway": gateway}, TWO_PM * 1000, 3600, 120)  # type: ignore[arg-type]
    assert fake.asked[0] == (accepted, TWO_PM - 119 * 30.252, TWO_PM, 30.252)
    assert [(s.name, s.value, s.unit) for s in view.series] == [
        ("Events accepted per second: gateway-dc1 to dc1", 2000.0, "/s")]
    assert view.errors == (f"Prometheus query failed: bad_data: parse error (in {p99})",)


def test_once_prometheus_does_not_answer_no_more_is_asked_and_every_panel_says_so():
    fake = FakePrometheus({}, down=True)
    views = read_panels(fake, DEFAULT_PANELS, TWO_PM * 1000, 3600, 120)  # type: ignore[arg-type]
    assert len(fake.asked) == 1
    assert {v.errors for v in views} == {("Prometheus query failed: Prometheus at http://127.0.0.1:9 did not answer "
                                          "(ConnectError: refused)",)}


def test_without_a_prometheus_every_panel_says_how_to_name_one():
    views = read_panels(None, DEFAULT_PANELS, TWO_PM * 1000, 3600, 120)
    assert [v.name for v in views] == list(DEFAULT_PANELS) and {v.errors for v in views} == {(NO_PROMETHEUS,)}
    assert "ops.prometheus_url" in NO_PROMETHEUS


def test_the_default_panels_of_the_parts_platform_yaml_runs_unless_it_sets_its_own():
    own = {"mine": REPLICATION}
    every = ["gateway", "replicator", "dispatcher", "views", "lake", "watcher", "throttle"]
    assert panels_of(None, every) == DEFAULT_PANELS and panels_of(own, []) == own
    # The demo's: no dispatcher and no throttle kept running, so no panels waiting for their figures.
    demo = panels_of(None, ["gateway", "replicator", "lake", "views", "watcher"])
    assert list(demo) == ["gateway", "replication", "lake", "realtime", "hosts"]
    assert list(panels_of(None, [])) == ["hosts"]


def test_the_default_panels_share_the_grafana_dashboards_expressions():
    shared = {expr for panel in DEFAULT_PANELS.values() for expr in (q.expr for q in panel.queries)}
    assert {expr for expr, _ in grafana.GATEWAY_P99.targets + grafana.REPLICATION_P99.targets} <= shared
    grafana_exprs = {expr for d in grafana.DASHBOARDS for p in d.panels for expr, _ in p.targets}
    for name in ("gateway", "replication", "dispatch", "hosts"):
        assert {q.expr for q in DEFAULT_PANELS[name].queries} <= grafana_exprs, name


def test_every_default_query_names_exported_metrics_and_their_labels():
    exported = exported_label_names() | NODE_EXPORTER_LABELS
    for name, panel in DEFAULT_PANELS.items():
        for query in panel.queries:
            metrics = set(_METRIC.findall(query.expr))
            assert metrics, (name, query.expr)
            for metric in metrics:
                assert metric in exported, (name, metric)
                used = _labels_used(query.expr, query.legend)
                if "histogram_quantile" in query.expr:
                    used -= {"le"}
                assert used <= exported[metric], (name, metric, used - exported[metric])


def _promtool(tmp_path: Path, tests: dict) -> None:
    path = tmp_path / "panels_test.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    tested = subprocess.run(["promtool", "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert tested.returncode == 0, tested.stdout + tested.stderr


@needs_promtool
def test_promtool_accepts_every_default_query(tmp_path: Path) -> None:
    rules = tmp_path / "panels.yml"
    rules.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": [
        {"record": f"panel:{name}:{i}", "expr": query.expr}
        for name, panel in DEFAULT_PANELS.items() for i, query in enumerate(panel.queries)]}]}))
    checked = subprocess.run(["promtool", "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@needs_promtool
def test_the_real_time_latency_is_over_5m_while_the_job_runs_and_over_its_run_after(tmp_path: Path) -> None:
    """Ten minutes of fast events (under 1 s), ten of slow ones (30-90 s), then a finished run's
    file, its buckets unchanged: during the slow minutes, the last 5m's p99; after, the run's."""
    p50, p99 = (query.expr for query in DEFAULT_PANELS["realtime"].queries)

    def bucket(le: str, values: str) -> dict[str, str]:
        return {"series": f'conveyor_realtime_latency_seconds_bucket{{instance="realtime",le="{le}"}}', "values": values}

    fast, every = "0+10x10 100+0x30", "0+10x20 200+0x20"
    _promtool(tmp_path, {"evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [bucket("1", fast), bucket("30", fast), bucket("90", every), bucket("+Inf", every)],
        "promql_expr_test": [
            {"expr": p99, "eval_time": "15m", "exp_samples": [{"labels": "{}", "value": 89.4}]},  # 30 + 60 * 0.99
            # Half the run under 1 s, half in (30, 90]: the run's p99 is 30 + 60 * 0.98, its p50 1 s.
            {"expr": p99, "eval_time": "40m", "exp_samples": [{"labels": "{}", "value": 88.8}]},
            {"expr": p50, "eval_time": "40m", "exp_samples": [{"labels": "{}", "value": 1}]},
        ]}]})
