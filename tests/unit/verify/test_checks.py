"""The pure checks of ``conveyor verify``, each from a table of cases."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from conveyor.config import RealtimeView
from conveyor.ops.panels import Family
from conveyor.pipeline.audit import HourAudit
from conveyor.pipeline.realtime.plan import ViewPlan, epoch_ms
from conveyor.verify.checks import (SAMPLE, AuditCheck, Group, Invariant, LakeOnce, Skipped, Unchecked, Verdict,
                                    compare_view, failed, parse_accepted, parse_dispatch_group, partition_backlog,
                                    recount, replicator_check)
from conveyor.verify.errors import VerifyInputError

HOUR = datetime(2025, 3, 1, 12, tzinfo=timezone.utc)
MINUTE_MS = 60_000
START = epoch_ms(HOUR)

CTR = ViewPlan.of("banner_ctr", RealtimeView.model_validate({
    "topic": "ad-events", "filter": {"type": ["impression", "click"]}, "group_by": ["banner_id"], "window": 60,
    "metrics": {"impressions": {"where": {"type": "impression"}}, "clicks": {"where": {"type": "click"}},
                "spend_micros": {"sum": "price_micros"}},
    "key": "view:{view}:{banner_id}:{window_start}"}))
#: A group-by field outside the key: its values name the hash fields.
INTERESTS = ViewPlan.of("user_interests", RealtimeView.model_validate({
    "topic": "ad-events", "group_by": ["user_id", "category"], "window": 3600,
    "metrics": {"events": {}, "clicks": {"where": {"type": "click"}}},
    "key": "view:{view}:{user_id}:{window_start}"}))


@pytest.mark.parametrize(("result", "verdict", "problems"), [
    (LakeOnce("t", 3, 3), Verdict.PASS, ()),
    (LakeOnce("t", 4, 3, ("a",)), Verdict.FAIL, ("ids landed more than once: a",)),
    (LakeOnce("t", 3, 3, accepted=3), Verdict.PASS, ()),
    (LakeOnce("t", 2, 2, accepted=3, missing=1, missing_ids=("c",)), Verdict.FAIL, ("accepted, not landed: c",)),
    (LakeOnce("t", 3, 3, accepted=2, unexpected=1, unexpected_ids=("x",)), Verdict.FAIL,
     ("landed, never accepted: x",)),
    (LakeOnce("t", 20, 20, accepted=32, missing=12, missing_ids=tuple("abcdefghij")), Verdict.FAIL,
     ("accepted, not landed: a, b, c, d, e, f, g, h, i, j and 2 more",)),
], ids=["each-once", "a-copy", "equal-to-accepted", "one-missing", "one-unexpected", "ten-named-of-twelve"])
def test_lake_fails_on_any_copy_missing_or_unexpected_id(result, verdict, problems):
    assert (result.verdict, result.problems) == (verdict, problems)


@pytest.mark.parametrize(("lines", "expected"), [
    (['{"topic": "a", "event_id": "1"}', "", '{"topic": "a", "event_id": "2"}', '{"topic": "b", "event_id": "1"}'],
     {"a": {"1", "2"}, "b": {"1"}}),
    (['{"topic": "a", "event_id": "1", "status": 202}'], {"a": {"1"}}),
    ([], {}),
])
def test_accepted_file_gives_the_ids_per_topic(lines, expected):
    assert parse_accepted(lines, "accepted.ndjson") == expected


@pytest.mark.parametrize(("lines", "message"), [
    (["{not json"], "accepted.ndjson, line 1: not JSON"),
    (['{"topic": "a", "event_id": "1"}', '{"topic": "a"}'], "accepted.ndjson, line 2: want"),
    (['["a", "1"]'], "line 1: want"),
    (['{"topic": "a", "event_id": 7}'], "line 1: want"),
])
def test_bad_accepted_line_names_its_line(lines, message):
    with pytest.raises(VerifyInputError, match=message.replace("{", r"\{")):
        parse_accepted(lines, "accepted.ndjson")


def _hour(lost: int = 0, copies: int = 0, complete: bool = True, hour: int = 0) -> HourAudit:
    return HourAudit("t", HOUR.replace(hour=hour), 10, 10 - lost + copies, 10 - lost, complete)


@pytest.mark.parametrize(("hours", "verdict", "complete", "pending", "failing"), [
    ([_hour(), _hour(hour=1)], Verdict.PASS, 2, 0, 0),
    ([_hour(lost=2)], Verdict.FAIL, 1, 0, 1),
    ([_hour(copies=1), _hour(hour=1)], Verdict.FAIL, 2, 0, 1),
    ([_hour(), _hour(lost=3, complete=False, hour=1)], Verdict.PASS, 1, 1, 0),
    ([], Verdict.PASS, 0, 0, 0),
], ids=["clean", "lost", "duplicated", "incomplete-hour-may-still-land", "nothing-yet"])
def test_audit_fails_only_on_a_complete_hour_with_loss_or_copies(hours, verdict, complete, pending, failing):
    check = AuditCheck.of(hours)
    assert (check.verdict, check.complete, check.pending, len(check.failed)) == (verdict, complete, pending, failing)


def _group(window: int = 0, rows: int = 1, price: int | None = None, **values: object) -> Group:
    return Group(values, START + window * MINUTE_MS, rows, {"price_micros": price})


def _key(banner: str, window: int = 0) -> str:
    return CTR.key({"banner_id": banner}, START + window * MINUTE_MS)


@pytest.mark.parametrize(("groups", "expected"), [
    ([_group(rows=3, price=30, type="impression", banner_id="b1"),
      _group(rows=1, price=5, type="click", banner_id="b1")],
     {_key("b1"): {"impressions": 3, "clicks": 1, "spend_micros": 35}}),
    ([_group(rows=2, type="conversion", banner_id="b1")], {}),
    ([_group(rows=2, type="impression", banner_id=None)], {}),
    ([_group(rows=2, type="impression", banner_id="b1"), _group(window=1, rows=1, type="impression", banner_id="b1")],
     {_key("b1"): {"impressions": 2, "spend_micros": 0}, _key("b1", 1): {"impressions": 1, "spend_micros": 0}}),
    ([_group(rows=1, price=2**63 - 1, type="click", banner_id="b"),
      _group(rows=1, price=9, type="click", banner_id="b")],
     {_key("b"): {"clicks": 2, "spend_micros": 2**63 - 1}}),
], ids=["metrics-where-and-sum", "outside-the-filter", "group-by-field-missing", "per-window", "saturates-as-redis"])
def test_recount_follows_the_views_rules(groups, expected):
    assert recount(CTR, groups) == expected


def test_recount_names_fields_after_group_by_values_outside_the_key():
    groups = [Group({"user_id": "u1", "category": "cars", "type": "click"}, START, 2),
              Group({"user_id": "u1", "category": "news", "type": "view"}, START, 1)]
    key = INTERESTS.key({"user_id": "u1"}, START)
    assert recount(INTERESTS, groups) == {key: {"events:cars": 2, "clicks:cars": 2, "events:news": 1}}


@pytest.mark.parametrize(("held", "recounted", "verdict", "windows", "counters", "mismatches"), [
    ({_key("b1"): {"impressions": 3, "clicks": 1}}, {_key("b1"): {"impressions": 3, "clicks": 1}},
     Verdict.PASS, 1, 2, []),
    ({_key("b1"): {"impressions": 3}}, {_key("b1"): {"impressions": 4}}, Verdict.FAIL, 1, 1,
     [(_key("b1"), "impressions", 3, 4)]),
    ({}, {_key("b1", 1): {"clicks": 1}}, Verdict.FAIL, 1, 1, [(_key("b1", 1), "clicks", 0, 1)]),
    ({_key("b2"): {"clicks": 2}}, {}, Verdict.FAIL, 1, 1, [(_key("b2"), "clicks", 2, 0)]),
    ({_key("b1"): {"spend_micros": 0}}, {_key("b1"): {}}, Verdict.PASS, 1, 1, []),
    ({_key("b1", -5): {"clicks": 9}}, {}, Verdict.PASS, 0, 0, []),
    ({"view:banner_ctr:b1:junk": {"clicks": 1}}, {}, Verdict.PASS, 0, 0, []),
], ids=["equal", "one-counter-differs", "key-missing-in-redis", "key-nothing-landed-for", "absent-counts-as-zero",
        "window-before-the-ttl-bound", "not-a-window-key"])
def test_view_differs_wherever_a_counter_differs_in_a_window_within_ttl(held, recounted, verdict, windows, counters,
                                                                       mismatches):
    check = compare_view(CTR, START, held, recounted, rejected=0)
    assert (check.verdict, check.windows, check.counters) == (verdict, windows, counters)
    assert [(m.key, m.field, m.redis, m.recount) for m in check.mismatches] == mismatches
    assert check.since == HOUR


def test_view_names_ten_mismatches_and_counts_them_all():
    held = {_key(f"b{i:02}"): {"clicks": 1} for i in range(12)}
    check = compare_view(CTR, START, held, {}, rejected=0)
    assert (check.mismatched, len(check.mismatches), len(check.problems)) == (12, SAMPLE, SAMPLE)


def _page(*values: tuple[str, float]) -> list[Family]:
    samples = tuple(("conveyor_replicate_partition_stopped", {"route": "dc1-central", "topic": t, "partition": "0"}, v)
                    for t, v in values)
    return [Family("conveyor_replicate_partition_stopped", "gauge", samples),
            Family("conveyor_replicate_lag_records", "gauge", (("conveyor_replicate_lag_records", {}, 5.0),))]


@pytest.mark.parametrize(("page", "verdict", "series", "stopped"), [
    (_page(("a", 0.0), ("b", 0.0)), Verdict.PASS, 2, []),
    (_page(("a", 0.0), ("b", 1.0)), Verdict.FAIL, 2, [("dc1-central", "b", "0")]),
    ([], Verdict.PASS, 0, []),
], ids=["none-stopped", "one-stopped", "no-partition-yet"])
def test_replicator_fails_on_any_stopped_series(page, verdict, series, stopped):
    check = replicator_check("replicate-dc1-central", page)
    assert (check.verdict, check.series) == (verdict, series)
    assert [(s.route, s.topic, s.partition) for s in check.stopped] == stopped


@pytest.mark.parametrize(("committed", "end", "acked", "records", "unacked", "first"), [
    (10, 10, (), [], 0, None),
    (10, 11, (), [], 0, None),  # a transaction marker: an offset, no record to ack
    (10, 14, (11, 13), [10, 11, 13], 1, 10),
    (10, 14, (10, 11, 12), [10, 11, 12], 0, None),
    (None, 3, (), [0, 1, 2], 3, 0),
], ids=["all-committed", "trailing-marker", "one-below-acks", "acked-above-commit", "never-committed"])
def test_dispatch_backlog_counts_records_not_acked(committed, end, acked, records, unacked, first):
    backlog = partition_backlog(0, committed, end, acked, records)
    assert (backlog.unacked, backlog.first_unacked) == (unacked, first)


@pytest.mark.parametrize(("text", "expected"), [("ad-events:mailer", ("ad-events", "mailer")),
                                                ("t:svc.batch", ("t", "svc.batch"))])
def test_dispatch_group_is_topic_colon_group(text, expected):
    assert parse_dispatch_group(text) == expected


@pytest.mark.parametrize("text", ["ad-events", ":mailer", "ad-events:"])
def test_dispatch_group_without_both_parts_is_refused(text):
    with pytest.raises(VerifyInputError, match="TOPIC:GROUP"):
        parse_dispatch_group(text)


def test_skipped_invariant_does_not_fail_but_an_unchecked_one_does():
    assert not failed([Skipped(Invariant.views, "", "no views"), LakeOnce("t", 1, 1)])
    assert failed([Unchecked(Invariant.replication, "replicate-dc1-central", "ConnectError")])


def test_bad_inputs_exit_2_with_one_line_before_anything_is_read(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    bad = tmp_path / "accepted.ndjson"
    bad.write_text('{"topic": "ad-events", "event_id": "1"}\n{"topic": "ad-events"}\n')
    for args, message in ((["--only", "lake", "--accepted", str(bad)], f"{bad}, line 2"),
                          (["--only", "dispatch", "--dispatch-group", "ad-events"], "give TOPIC:GROUP")):
        done = subprocess.run([sys.executable, "-m", "conveyor", "verify", "-p", str(root / "platform.yaml"), *args],
                              capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert done.returncode == 2, done.stderr
        assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
