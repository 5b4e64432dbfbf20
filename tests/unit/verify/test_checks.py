"""The pure checks of ``conveyor verify``, each from a table of cases."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from conveyor.pipeline.audit import HourAudit
from conveyor.verify.checks import (AuditCheck, Invariant, LakeOnce, Skipped, Unchecked, Verdict, at_least,
                                    exit_status, failed, parse_accepted, parse_dispatch_group, partition_backlog)
from conveyor.verify.copies import compare_copies, digest, parse_gap, parse_origin
from conveyor.verify.errors import VerifyInputError

HOUR = datetime(2025, 3, 1, 12, tzinfo=timezone.utc)


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


def _copies_of(source: dict, copies: dict, gaps=(), exact=True, ranges=None):
    return compare_copies("dc1-central: t", "t", exact, source, ranges or {0: (0, 100)}, copies, list(gaps))


D1, D2 = digest(b"k", b"v1"), digest(b"k", b"v2")


@pytest.mark.parametrize(("source", "copies", "gaps", "exact", "verdict", "figures"), [
    ({(0, 0): D1, (0, 1): D2}, {(0, 0): [D1], (0, 1): [D2]}, (), True, Verdict.PASS, (2, 0, 0, 0, 0, 0)),
    ({(0, 0): D1, (0, 1): D2}, {(0, 0): [D1]}, (), True, Verdict.FAIL, (2, 1, 0, 0, 0, 0)),
    ({(0, 0): D1}, {(0, 0): [D1, D1]}, (), True, Verdict.FAIL, (1, 0, 1, 0, 0, 0)),
    ({(0, 0): D1}, {(0, 0): [D1, D1]}, (), False, Verdict.PASS, (1, 0, 1, 0, 0, 0)),
    ({(0, 0): D1}, {(0, 0): [D2]}, (), True, Verdict.FAIL, (1, 0, 0, 1, 0, 0)),
    # A copy of an offset the source holds no committed record at (an aborted one, a marker).
    ({(0, 0): D1}, {(0, 0): [D1], (0, 5): [D2]}, (), True, Verdict.FAIL, (1, 0, 0, 0, 1, 0)),
    # Below the source's earliest offset, and past the end it had when read: nothing to compare.
    ({(0, 50): D1}, {(0, 3): [D2], (0, 50): [D1], (0, 100): [D2]}, (), True, Verdict.PASS, (1, 0, 0, 0, 0, 0)),
    ({(0, 20): D1}, {(0, 20): [D1]}, [(0, 5, 9)], True, Verdict.FAIL, (1, 0, 0, 0, 0, 5)),
], ids=["all-copied", "one-missing", "copied-twice", "twice-at-least-once", "differs", "no-such-source-record",
        "outside-the-source-range", "a-recorded-gap"])
def test_every_source_record_against_its_copies(source, copies, gaps, exact, verdict, figures):
    ranges = {0: (50, 100)} if (0, 50) in source else None
    check = _copies_of(source, copies, gaps, exact, ranges)
    assert check.verdict is verdict
    assert (check.checked, check.missing, check.copied_twice, check.differ, check.unknown, check.lost_in_gaps) == figures


def test_copies_name_the_offsets_and_the_gaps():
    check = _copies_of({(0, 1): D1, (1, 7): D1}, {(0, 1): [D1]}, [(2, 5, 9)])
    assert check.problems == ("missing: t[1]@7", "lost in gaps: t[2]@5..9")


def test_an_origin_header_names_cluster_topic_partition_and_offset():
    assert parse_origin(b"dc1/ad-events/3/120") == ("dc1", "ad-events", 3, 120)
    assert parse_origin(b"dc1/ad-events/x/1") is None and parse_origin(b"garbage") is None
    assert parse_gap(b'{"topic": "t", "partition": 2, "next": 10, "gap": {"first": 5, "last": 9}}') == ("t", 2, 5, 9)
    assert parse_gap(b'{"topic": "t", "partition": 2, "next": 10}') is None
    assert digest(None, b"") != digest(b"", b"")


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


def test_a_skip_has_an_exit_status_of_its_own_and_too_few_events_fail():
    skipped, held, empty = Skipped(Invariant.views, "", "no views"), LakeOnce("t", 5, 5), LakeOnce("u", 0, 0)
    assert exit_status([held]) == 0 and exit_status([held, skipped]) == 3 and exit_status([]) == 3
    assert exit_status([held, empty]) == 0
    checked = at_least([held, empty, skipped], 1)
    assert [r.verdict for r in checked] == [Verdict.PASS, Verdict.FAIL, Verdict.SKIP]
    assert checked[1].summary.startswith("checked 0 event(s), fewer than --min-events 1") and exit_status(checked) == 1


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
