"""pipeline.realtime in platform.yaml: the demo views load; each kind of bad view names its problem."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from conveyor.config import ConfigError, load_platform, parse_platform
from conveyor.pipeline.realtime.plan import RealtimeConfigError, ViewPlan, job_id, job_views

ROOT = Path(__file__).resolve().parents[3]
DEMO = yaml.safe_load((ROOT / "platform.yaml").read_text())


def _with_view(**changes):
    data = copy.deepcopy(DEMO)
    view = data["pipeline"]["realtime"]["views"]["banner_ctr"]
    for key, value in changes.items():
        if value is None:
            view.pop(key, None)
        else:
            view[key] = value
    return data


def _problems(data) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse_platform(data, root=ROOT)
    return [str(p) for p in caught.value.problems]


def test_demo_views_load_with_ctr_and_interest_counters():
    platform = load_platform(ROOT / "platform.yaml")
    views = platform.pipeline.realtime.views
    assert set(views) == {"banner_ctr", "user_interests"}
    assert views["banner_ctr"].window == 60 and views["banner_ctr"].ratios == {"ctr": ("clicks", "impressions")}
    interests = ViewPlan.of("user_interests", views["user_interests"])
    assert interests.field_parts == ("category",)  # one hash per user and hour, a field per category
    assert interests.field("clicks", {"user_id": "u", "category": "travel"}) == "clicks:travel"
    assert platform.topics["_realtime_rejects"].clusters == ["central"]


@pytest.mark.parametrize(("changes", "expected"), [
    ({"group_by": ["banner"], "key": None}, "group_by: field 'banner' is not in the contract of 'ad-events'"),
    ({"filter": {"kind": "click"}}, "filter: field 'kind' is not in the contract"),
    ({"metrics": {"spend": {"sum": "site_id"}}, "ratios": None}, "metrics.spend.sum: field 'site_id' is not an integer"),
    ({"metrics": {"n": {"where": {"colour": "red"}}}, "ratios": None}, "metrics.n.where: field 'colour' is not in the contract"),
    ({"topic": "nope"}, "topic: names unknown topic 'nope'"),
    ({"key": "view:{banner_id}:{window_start}"}, "key must contain {view} and {window_start}"),
    ({"key": "view:{view}:{site_id}:{window_start}"}, "key names ['site_id']"),
    ({"ratios": {"ctr": ["clicks", "views"]}}, "ratio 'ctr' names metrics that the view does not have"),
    ({"ttl": "2m"}, "ttl must exceed window + allowed_lateness"),
    ({"window": "0s"}, "window: must be > 0"),
])
def test_a_bad_view_names_its_problem(changes, expected):
    problems = _problems(_with_view(**changes))
    assert any(expected in p for p in problems), problems
    assert all(p.startswith("pipeline.realtime.views.banner_ctr") for p in problems), problems


def test_keys_render_the_layout_and_the_window_start():
    platform = load_platform(ROOT / "platform.yaml")
    plan = ViewPlan.of("banner_ctr", platform.pipeline.realtime.views["banner_ctr"])
    start = plan.window_start(1_740_830_163_123)  # 2025-03-01T11:56:03.123Z
    assert plan.key({"banner_id": "banner-9"}, start) == "view:banner_ctr:banner-9:20250301T115600Z"
    assert plan.field("clicks", {"banner_id": "banner-9"}) == "clicks"


def test_a_job_is_its_set_of_views():
    platform = load_platform(ROOT / "platform.yaml")
    assert list(job_views(platform)) == ["banner_ctr", "user_interests"]
    assert job_id(job_views(platform, ["user_interests", "banner_ctr"])) == "banner_ctr+user_interests"
    with pytest.raises(RealtimeConfigError, match="no such view"):
        job_views(platform, ["clicks"])


def test_the_command_refuses_an_unknown_view_before_spark_starts():
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-m", "conveyor", "views", "run", "--views", "nope"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert run.returncode == 1
    assert "no such view(s): nope (declared: banner_ctr, user_interests)" in run.stderr
