"""The panel interface: components' /metrics pages into panel series (no servers)."""

from __future__ import annotations

import math

import pytest

from conveyor.config import OpsPanel
from conveyor.ops.panels import (MAX_SERIES, STRIP_CELLS, PanelTracker, complete_hours, histogram_quantile,
                                 series_values, unit_of)
from conveyor.ops.scrape import parse_page

T0 = 1_700_000_000_000


def page(accepted: float, buckets: tuple[float, float, float], backlog: float = 7.0) -> str:
    b1, b2, inf = buckets
    return f"""# HELP conveyor_gateway_events_accepted_total Events
# TYPE conveyor_gateway_events_accepted_total counter
conveyor_gateway_events_accepted_total{{topic="ad-events",cluster="dc1"}} {accepted}
# HELP conveyor_gateway_request_seconds Time
# TYPE conveyor_gateway_request_seconds histogram
conveyor_gateway_request_seconds_bucket{{topic="ad-events",le="0.01"}} {b1}
conveyor_gateway_request_seconds_bucket{{topic="ad-events",le="0.1"}} {b2}
conveyor_gateway_request_seconds_bucket{{topic="ad-events",le="+Inf"}} {inf}
conveyor_gateway_request_seconds_count{{topic="ad-events"}} {inf}
conveyor_gateway_request_seconds_sum{{topic="ad-events"}} 1.0
# HELP conveyor_dispatch_backlog_messages Backlog
# TYPE conveyor_dispatch_backlog_messages gauge
conveyor_dispatch_backlog_messages{{topic="notifications",group="mailer"}} {backlog}
# HELP conveyor_audit_check_seconds Check time
# TYPE conveyor_audit_check_seconds summary
conveyor_audit_check_seconds{{quantile="0.5"}} 0.2
conveyor_audit_check_seconds{{quantile="0.99"}} 0.9
conveyor_audit_check_seconds_count 10
conveyor_audit_check_seconds_sum 3
"""


def families(text: str) -> dict:
    return {f.name: f for f in parse_page(text)}


@pytest.mark.parametrize("q, buckets, expected", [
    pytest.param(0.99, [(0.01, 0), (0.1, 100), (math.inf, 100)], 0.0991, id="inside-a-bucket"),
    pytest.param(0.5, [(0.01, 50), (0.1, 100), (math.inf, 100)], 0.01, id="at-a-bound"),
    pytest.param(0.99, [(0.01, 10), (0.1, 10), (math.inf, 100)], 0.1, id="beyond-the-last-finite-bound"),
    pytest.param(0.99, [(0.01, 0), (math.inf, 0)], None, id="no-observations"),
])
def test_histogram_quantile(q, buckets, expected):
    result = histogram_quantile(q, buckets)
    assert result == pytest.approx(expected) if expected is not None else result is None


@pytest.mark.parametrize("name, kind, unit", [
    pytest.param("conveyor_realtime_latency_seconds", "histogram", "s", id="seconds"),
    pytest.param("conveyor_gateway_events_accepted", "counter", "/s", id="counter-rate"),
    pytest.param("conveyor_replicate_copied_bytes", "counter", "B/s", id="bytes-rate"),
    pytest.param("conveyor_dispatch_backlog_messages", "gauge", "messages", id="gauge"),
    pytest.param("conveyor_throttle_quota_bytes_per_second", "gauge", "B/s", id="configured-limit"),
])
def test_unit_of(name, kind, unit):
    assert unit_of(name, kind) == unit


def test_series_value_per_type():
    before = families(page(100, (10, 20, 20)))
    after = families(page(160, (10, 120, 120)))
    accepted = series_values(after["conveyor_gateway_events_accepted"], before["conveyor_gateway_events_accepted"], 10)
    assert accepted == {(("cluster", "dc1"), ("topic", "ad-events")): 6.0}
    p99 = series_values(after["conveyor_gateway_request_seconds"], before["conveyor_gateway_request_seconds"], 10)
    assert p99[(("topic", "ad-events"),)] == pytest.approx(0.0991)  # from the 100 new observations only
    assert series_values(after["conveyor_dispatch_backlog_messages"], None, 0) == {
        (("group", "mailer"), ("topic", "notifications")): 7.0}
    assert series_values(after["conveyor_audit_check_seconds"], None, 0) == {(): 0.9}
    first = series_values(after["conveyor_gateway_events_accepted"], None, 0)
    assert list(first.values()) == [None]  # a rate needs two scrapes


def test_counter_reset_gives_no_rate():
    before = families(page(500, (0, 0, 0)))
    after = families(page(20, (0, 0, 0)))
    values = series_values(after["conveyor_gateway_events_accepted"], before["conveyor_gateway_events_accepted"], 5)
    assert list(values.values()) == [None]


PANELS = {
    "gateway": OpsPanel(title="Gateway", metrics=["conveyor_gateway_*"]),
    "dispatch": OpsPanel(title="Dispatcher backlog", metrics=["conveyor_dispatch_*backlog*"]),
    "lake": OpsPanel(title="Lake", metrics=["conveyor_lake_*"]),
}


def test_tracker_fills_matching_panels_and_keeps_history():
    tracker = PanelTracker(PANELS, history=3)
    for i, accepted in enumerate((100, 150, 250, 300)):
        tracker.push(T0 + i * 10_000, {"gw": parse_page(page(accepted, (0, i * 10, i * 10), backlog=i)),
                                       "spark": "ConnectError: refused"})
    views = {v.name: v for v in tracker.views()}
    gateway = views["gateway"]
    assert [(s.metric, s.unit) for s in gateway.series] == [("conveyor_gateway_events_accepted", "/s"),
                                                           ("conveyor_gateway_request_seconds", "s")]
    accepted = gateway.series[0]
    assert accepted.value == 5.0 and accepted.component == "gw" and accepted.labels == "cluster=dc1, topic=ad-events"
    assert [v for _, v in accepted.history] == [5.0, 10.0, 5.0]  # the first (no rate yet) fell out
    assert views["dispatch"].series[0].value == 3.0
    assert views["lake"].series == () and views["lake"].down == (("spark", "ConnectError: refused"),)


def test_a_panel_shows_at_most_max_series():
    lines = "\n".join(f'conveyor_lake_rows{{topic="t{i}"}} {i}' for i in range(MAX_SERIES + 5))
    tracker = PanelTracker(PANELS)
    tracker.push(T0, {"lake": parse_page(f"# TYPE conveyor_lake_rows gauge\n{lines}\n")})
    lake = next(v for v in tracker.views() if v.name == "lake")
    assert len(lake.series) == MAX_SERIES and lake.more == 5


REPLICATOR = """# TYPE conveyor_replicate_lag_records gauge
conveyor_replicate_lag_records{{route="dc1-central",topic="ad-events",partition="0"}} {a}
conveyor_replicate_lag_records{{route="dc1-central",topic="ad-events",partition="1"}} {b}
conveyor_replicate_lag_records{{route="dc1-central",topic="clicks",partition="0"}} 5
# TYPE conveyor_replicate_latency_seconds histogram
conveyor_replicate_latency_seconds_bucket{{route="dc1-central",le="0.1"}} {fast}
conveyor_replicate_latency_seconds_bucket{{route="dc1-central",le="1.0"}} {all}
conveyor_replicate_latency_seconds_bucket{{route="dc1-central",le="+Inf"}} {all}
conveyor_replicate_latency_seconds_count{{route="dc1-central"}} {all}
conveyor_replicate_latency_seconds_sum{{route="dc1-central"}} 10
"""


def test_a_panel_by_route_sums_the_partitions_of_each_route():
    tracker = PanelTracker({"replication": OpsPanel(title="Replication", metrics=["conveyor_replicate_*"],
                                                    by=["route"])})
    tracker.push(T0, {"replicate-dc1": parse_page(REPLICATOR.format(a=10, b=20, fast=0, all=100))})
    tracker.push(T0 + 5000, {"replicate-dc1": parse_page(REPLICATOR.format(a=1, b=2, fast=50, all=200))})
    (view,) = tracker.views()
    series = {s.metric: s for s in view.series}
    assert series["conveyor_replicate_lag_records"].labels == "route=dc1-central"
    assert [v for _, v in series["conveyor_replicate_lag_records"].history] == [35, 8]
    # The second scrape's 100 observations: 50 under 0.1 s, all under 1 s -> p99 interpolated in (0.1, 1].
    assert series["conveyor_replicate_latency_seconds"].value == pytest.approx(0.1 + 0.9 * (99 - 50) / 50)


def test_a_histogram_read_from_a_file_is_its_p99_over_the_whole_run():
    tracker = PanelTracker({"gateway": OpsPanel(title="Gateway", metrics=["conveyor_gateway_request_seconds"])})
    for at in (T0, T0 + 5000):  # a finished run's file: the same buckets at every read
        tracker.push(at, {"gw": parse_page(page(100, (0, 100, 100)))}, {"gw": T0 / 1000})
    (view,) = tracker.views()
    assert [s.value for s in view.series] == [pytest.approx(0.0991)]


def test_a_sum_with_an_unknown_part_is_unknown():
    values = series_values(parse_page("# TYPE x_total counter\nx_total{p=\"0\"} 5\nx_total{p=\"1\"} 5\n")[0],
                           parse_page("# TYPE x_total counter\nx_total{p=\"0\"} 1\n")[0], 2.0, keep=[])
    assert values == {(): None}


LAKE = """# TYPE conveyor_lake_complete_until_timestamp_seconds gauge
conveyor_lake_complete_until_timestamp_seconds{{topic="ad-events"}} {ads}
conveyor_lake_complete_until_timestamp_seconds{{topic="clicks"}} 0
"""
#: 2026-05-01T14:00Z and 12:00Z.
TWO_PM, NOON = 1777644000, 1777636800


def test_the_end_of_the_last_complete_hour_makes_a_strip_of_the_day_up_to_the_scrape_s_hour():
    cells = complete_hours(NOON, (TWO_PM + 1800) * 1000)
    assert len(cells) == STRIP_CELLS and cells[0][0] == "2026-04-30T15:00Z" and cells[-1][0] == "2026-05-01T14:00Z"
    assert [v for _, v in cells[-4:]] == [1.0, 0.0, 0.0, 0.0]  # 11:00 ends at noon; 12:00, 13:00 and 14:00 do not
    assert {v for _, v in complete_hours(None, TWO_PM * 1000)} == {None}


def test_a_complete_until_gauge_is_a_strip_per_label_set_of_its_latest_value():
    tracker = PanelTracker({"lake": OpsPanel(title="Lake", metrics=["conveyor_lake_*"])})
    tracker.push(TWO_PM * 1000, {"lake": parse_page(LAKE.format(ads=NOON - 3600))}, {"lake": TWO_PM - 60})
    tracker.push(TWO_PM * 1000 + 5000, {"lake": parse_page(LAKE.format(ads=NOON))}, {"lake": TWO_PM})
    (view,) = tracker.views()
    strips = {s.labels: [v for _, v in s.strip[-3:]] for s in view.series}
    assert strips == {"topic=ad-events": [0.0, 0.0, 0.0], "topic=clicks": [0.0, 0.0, 0.0]}
    ads = next(s for s in view.series if s.labels == "topic=ad-events")
    assert ads.strip[-4][1] == 1.0 and ads.unit == "" and ads.history == ()
    assert view.written == (("lake", TWO_PM),)


def test_a_file_component_is_read_with_the_time_it_was_written(tmp_path):
    from conveyor.ops.scrape import Scraper

    page_file = tmp_path / "lake.prom"
    page_file.write_text(LAKE.format(ads=NOON))
    scraper = Scraper()
    try:
        (found, written), (missing, never) = scraper.pages_written([f"file:{page_file}", f"file:{tmp_path}/none"])
    finally:
        scraper.close()
    assert [f.name for f in found] == ["conveyor_lake_complete_until_timestamp_seconds"] and written == page_file.stat().st_mtime
    assert isinstance(missing, str) and "FileNotFoundError" in missing and never is None
