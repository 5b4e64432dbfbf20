"""Rewind evidence kept across watcher restarts: its records round-trip, and the moves back made
while no watcher ran are found from the group's commit records, or reported as evidence gone."""

from __future__ import annotations

from conveyor.ops.commit_log import Commit, CommitLog
from conveyor.ops.rewind import FindingKind, OffsetFinding
from conveyor.ops.rewind_history import (AFTER_RESTART, EVIDENCE_GONE, Seen, decode, evidence_record, missed,
                                         restored, seen_record)
from conveyor.ops.tracker import RewindEvidence

SEEN_AT = 1_000_000
TP = ("orders", 0)


def _commit(offset: int | None, at: int, log_offset: int, partition: int = 0) -> Commit:
    return Commit("orders", partition, offset, 3, "", at, log_offset, at, 7)


def _log(*commits: Commit) -> CommitLog:
    return CommitLog("billing", 4, 1, commits)


def test_evidence_and_seen_offsets_round_trip_through_their_records():
    finding = OffsetFinding(FindingKind.RESET_EARLIEST, "billing", "orders", 0, 2_000, 80, 0, 80, True, 1_000)
    evidence = RewindEvidence("central", "billing", finding, 1_000, 2_000, {TP: 80, ("orders", 1): None}, {TP: 0},
                              _log(_commit(80, 900, 10), _commit(0, 1_900, 11)), None, AFTER_RESTART)
    key, value = evidence_record(evidence)
    assert key == b"rewind/billing/orders/0/2000"
    assert decode(key, value) == evidence
    seen = Seen("billing", SEEN_AT, {TP: 80, ("orders", 1): 5})
    assert decode(*seen_record(seen)) == seen
    assert decode(b"rewind/x", None) is None  # a tombstone
    records = [decode(key, value), decode(*seen_record(seen)), decode(*seen_record(Seen("billing", SEEN_AT + 1, {})))]
    assert restored(records) == ([evidence], {"billing": Seen("billing", SEEN_AT + 1, {})})


def test_a_move_back_while_no_watcher_ran_is_found_in_the_commit_records():
    seen = Seen("billing", SEEN_AT, {TP: 80})
    log = _log(_commit(80, SEEN_AT - 5, 9), _commit(90, SEEN_AT + 10, 10), _commit(20, SEEN_AT + 20, 11),
               _commit(25, SEEN_AT + 30, 12))
    (found,) = missed("central", seen, {TP: 25}, SEEN_AT + 60, log)
    assert (found.found, found.finding.from_offset, found.finding.to_offset, found.finding.records) == (
        AFTER_RESTART, 90, 20, 70)
    assert (found.before_ms, found.after_ms, found.commit_log) == (SEEN_AT, SEEN_AT + 20, log)


def test_a_move_back_the_group_has_committed_past_since_is_found_while_the_log_holds_it():
    seen = Seen("billing", SEEN_AT, {TP: 80})
    log = _log(_commit(10, SEEN_AT + 20, 11), _commit(120, SEEN_AT + 30, 12))
    (found,) = missed("central", seen, {TP: 120}, SEEN_AT + 60, log)
    assert (found.finding.from_offset, found.finding.to_offset) == (80, 10)
    # Compacted: only the latest commit is left, and nothing shows the move.
    assert missed("central", seen, {TP: 120}, SEEN_AT + 60, _log(_commit(120, SEEN_AT + 30, 12))) == []


def test_a_committed_offset_below_the_last_seen_without_its_records_is_evidence_gone():
    seen = Seen("billing", SEEN_AT, {TP: 80, ("orders", 1): 5})
    (gone,) = missed("central", seen, {TP: 30, ("orders", 1): 9}, SEEN_AT + 60, _log())
    assert (gone.found, gone.finding.from_offset, gone.finding.to_offset, gone.after_ms) == (
        EVIDENCE_GONE, 80, 30, SEEN_AT + 60)
    assert "compacted the move away" in gone.commit_log_error
    (unread,) = missed("central", seen, {TP: 30}, SEEN_AT + 60, None, "KafkaException: timed out")
    assert (unread.found, unread.commit_log_error) == (EVIDENCE_GONE, "KafkaException: timed out")


def test_offsets_that_only_moved_forward_leave_nothing():
    seen = Seen("billing", SEEN_AT, {TP: 80})
    assert missed("central", seen, {TP: 95}, SEEN_AT + 60, _log(_commit(90, SEEN_AT + 10, 10),
                                                                  _commit(95, SEEN_AT + 20, 11))) == []
