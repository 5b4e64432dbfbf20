"""Rewind evidence that outlives the watcher: its records in a compacted topic, and the rewinds made
while no watcher ran, found from ``__consumer_offsets``. Pure: the reading and writing are
:mod:`conveyor.ops.rewind_store`'s.

The watcher keeps two kinds of record per cluster, the latest per key winning:

- ``rewind/<group>/<topic>/<partition>/<at_ms>``: one piece of evidence, as the watcher kept it;
- ``seen/<group>``: the group's committed offsets at the watcher's latest round.

After a restart the watcher compares each group's committed offsets with what it last saw, and
reads the group's commit records since then. A commit below the one before it (the last seen
offset first) is a move back made while nobody watched: kept as evidence with those records. A
committed offset below the last seen one with no such commit left in the log (the cleaner compacted
the records of the move away) is kept as "evidence gone": the move is certain, its records are not.
A move back the group has since committed past is found only while the log still holds the commits
in between: compaction leaves the latest commit of each partition, and nothing says what it removed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import orjson

from conveyor.ops.commit_log import Commit, CommitLog
from conveyor.ops.rewind import FindingKind, OffsetFinding
from conveyor.ops.tracker import RewindEvidence, TopicPartition

#: How ``RewindEvidence.found`` says it was found.
WATCHED, AFTER_RESTART, EVIDENCE_GONE = "watched", "after a restart", "evidence gone"


@dataclass(frozen=True, slots=True)
class Seen:
    """A group's committed offsets at the watcher's latest round."""

    group: str
    at_ms: int
    committed: Mapping[TopicPartition, int]


def _offsets(offsets: Mapping[TopicPartition, int | None]) -> list[list[Any]]:
    return [[t, p, o] for (t, p), o in sorted(offsets.items())]


def _offsets_back(rows: Iterable[list[Any]]) -> dict[TopicPartition, Any]:
    return {(t, p): o for t, p, o in rows}


def evidence_record(e: RewindEvidence) -> tuple[bytes, bytes]:
    f = e.finding
    key = f"rewind/{e.group}/{f.topic}/{f.partition}/{f.at_ms}"
    value = {"cluster": e.cluster, "group": e.group, "finding": {**asdict(f), "kind": f.kind.name},
             "before_ms": e.before_ms, "after_ms": e.after_ms, "before": _offsets(e.before), "after": _offsets(e.after),
             "commit_log": None if e.commit_log is None else {
                 "group": e.commit_log.group, "partition": e.commit_log.partition,
                 "coordinator": e.commit_log.coordinator, "truncated": e.commit_log.truncated,
                 "commits": [asdict(c) for c in e.commit_log.commits]},
             "commit_log_error": e.commit_log_error, "found": e.found}
    return key.encode(), orjson.dumps(value)


def seen_record(seen: Seen) -> tuple[bytes, bytes]:
    return (f"seen/{seen.group}".encode(),
            orjson.dumps({"group": seen.group, "at_ms": seen.at_ms, "committed": _offsets(seen.committed)}))


def decode(key: bytes, value: bytes | None) -> RewindEvidence | Seen | None:
    """The record's evidence or last seen offsets; None for a tombstone or a key of another kind."""
    if value is None:
        return None
    data = orjson.loads(value)
    if key.startswith(b"seen/"):
        return Seen(data["group"], data["at_ms"], _offsets_back(data["committed"]))
    if not key.startswith(b"rewind/"):
        return None
    log = data["commit_log"]
    return RewindEvidence(
        data["cluster"], data["group"], OffsetFinding(**{**data["finding"], "kind": FindingKind[data["finding"]["kind"]]}),
        data["before_ms"], data["after_ms"], _offsets_back(data["before"]), _offsets_back(data["after"]),
        None if log is None else CommitLog(log["group"], log["partition"], log["coordinator"],
                                           tuple(Commit(**c) for c in log["commits"]), log["truncated"]),
        data["commit_log_error"], data["found"])


def missed(cluster: str, seen: Seen, committed: Mapping[TopicPartition, int], at_ms: int,
           log: CommitLog | None, log_error: str | None = None) -> list[RewindEvidence]:
    """The moves back of ``seen.group`` between ``seen`` and ``committed`` (read at ``at_ms``), from
    its commit records since ``seen.at_ms`` (``log``; None when they could not be read: ``log_error``)."""
    found = []
    for tp, last in sorted(seen.committed.items()):
        now = committed.get(tp)
        trail = sorted((c for c in (log.commits if log else ()) if (c.topic, c.partition) == tp
                        and c.written_ms >= seen.at_ms and c.offset is not None), key=lambda c: c.log_offset)
        previous, move = last, None
        for commit in trail:
            assert commit.offset is not None
            if commit.offset < previous:
                move = (previous, commit)
                break
            previous = commit.offset
        if move is not None:
            before, commit = move
            assert commit.offset is not None
            finding = OffsetFinding(FindingKind.REWIND, seen.group, tp[0], tp[1], commit.written_ms, before,
                                    commit.offset, before - commit.offset, from_ms=seen.at_ms)
            found.append(RewindEvidence(cluster, seen.group, finding, seen.at_ms, commit.written_ms, seen.committed,
                                        {tp: commit.offset}, log, None, AFTER_RESTART))
        elif now is not None and now < last:
            finding = OffsetFinding(FindingKind.REWIND, seen.group, tp[0], tp[1], at_ms, last, now, last - now,
                                    from_ms=seen.at_ms)
            why = log_error or (f"no commit of {tp[0]}[{tp[1]}] below {last} is left in __consumer_offsets since "
                                f"the watcher last saw it: the log cleaner compacted the move away")
            found.append(RewindEvidence(cluster, seen.group, finding, seen.at_ms, at_ms, seen.committed,
                                        dict(committed), log, why, EVIDENCE_GONE))
    return found


def restored(records: Iterable[RewindEvidence | Seen | None]) -> tuple[list[RewindEvidence], dict[str, Seen]]:
    """The evidence (oldest first) and each group's last seen offsets among a topic's records."""
    evidence: list[RewindEvidence] = []
    seen: dict[str, Seen] = {}
    for record in records:
        if isinstance(record, RewindEvidence):
            evidence.append(record)
        elif isinstance(record, Seen):
            seen[record.group] = record
    return sorted(evidence, key=lambda e: e.after_ms), seen
