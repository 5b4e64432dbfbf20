"""Every record of a source cluster against its copies on the destination. Pure.

The replicator names on each copy where it came from (``conveyor-origin: cluster/topic/partition/
offset``). Verify reads both sides itself: the source's committed records (a transaction's markers
and aborted records are nothing to copy) and the destination's copies, and compares them by a
digest of key and value. It trusts no counter of the replicator: a record is copied when its copy
is on the destination, and lost when it is not, whatever the replicator says. The gaps the route
topic records (retention deleted records before they were copied) are lost too, named with their
offsets.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import orjson

from conveyor.verify.checks import SAMPLE, Invariant, Verdict

#: The header a copy carries, as the replicator writes it.
ORIGIN_HEADER = "conveyor-origin"

#: (partition, offset) of a record.
Coordinates = tuple[int, int]


def digest(key: bytes | None, value: bytes | None) -> bytes:
    """What a copy must equal: its key and value (a None and an empty one differ)."""
    hashed = hashlib.blake2b(digest_size=12)
    for part in (key, value):
        hashed.update(b"\0" if part is None else b"\1" + len(part).to_bytes(4, "big") + part)
    return hashed.digest()


def parse_origin(header: bytes) -> tuple[str, str, int, int] | None:
    """(cluster, topic, partition, offset) of a copy's origin header; None when it is not one
    (Kafka's topic and cluster names hold no slash)."""
    parts = header.decode("utf-8", "replace").split("/")
    if len(parts) != 4 or not parts[2].isdigit() or not parts[3].isdigit():
        return None
    return parts[0], parts[1], int(parts[2]), int(parts[3])


def parse_gap(value: bytes) -> tuple[str, int, int, int] | None:
    """(topic, partition, first, last) of a gap record of a route topic; None for its other records."""
    try:
        record = orjson.loads(value)
        gap = record.get("gap")
        return None if gap is None else (record["topic"], int(record["partition"]), int(gap["first"]),
                                         int(gap["last"]))
    except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError):
        return None


def _at(topic: str, where: Sequence[Coordinates]) -> tuple[str, ...]:
    return tuple(f"{topic}[{p}]@{o}" for p, o in sorted(where)[:SAMPLE])


@dataclass(frozen=True)
class CopyCheck:
    """One topic of one route: the source's committed records against their copies."""

    invariant: ClassVar[Invariant] = Invariant.replication
    subject: str
    #: Exact delivery: a copy made twice fails; at least once: copies are allowed.
    exact: bool
    #: Source records compared (those retention had not deleted when verify read them).
    checked: int
    missing: int
    copied_twice: int
    differ: int
    #: Copies naming a source offset the source holds no committed record at.
    unknown: int
    #: Records retention deleted before the route copied them (the route topic's gaps).
    lost_in_gaps: int
    samples: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def verdict(self) -> Verdict:
        bad = self.missing or self.differ or self.unknown or self.lost_in_gaps or (self.exact and self.copied_twice)
        return Verdict.FAIL if bad else Verdict.PASS

    @property
    def summary(self) -> str:
        twice = f"{self.copied_twice:,} copied twice" + ("" if self.exact else " (at least once: allowed)")
        return (f"{self.checked:,} source records: {self.missing:,} missing, {twice}, {self.differ:,} differ, "
                f"{self.unknown:,} copies of no source record, {self.lost_in_gaps:,} lost in recorded gaps")

    @property
    def problems(self) -> tuple[str, ...]:
        return tuple(f"{what}: {', '.join(where)}" for what, where in self.samples if where)


def compare_copies(subject: str, topic: str, exact: bool, source: Mapping[Coordinates, bytes],
                   ranges: Mapping[int, tuple[int, int]], copies: Mapping[Coordinates, Sequence[bytes]],
                   gaps: Sequence[tuple[int, int, int]]) -> CopyCheck:
    """``source``: digest per committed record of each partition's ``ranges`` (earliest offset,
    end) when it was read, before the destination: below the earliest nothing can be compared, and a
    copy past the end is of a record written since; ``copies``: the digests of the copies per
    origin; ``gaps``: (partition, first, last) recorded lost."""
    missing = [at for at in source if at not in copies]
    twice = [at for at, found in copies.items() if at in source and len(found) > 1]
    differ = [at for at, found in copies.items() if at in source and any(d != source[at] for d in found)]
    unknown = [(p, o) for (p, o) in copies
               if (p, o) not in source and ranges.get(p, (0, 0))[0] <= o < ranges.get(p, (0, 0))[1]]
    in_gaps = sorted(set(gaps))
    samples = (("missing", _at(topic, missing)), ("copied twice", _at(topic, twice)), ("differ", _at(topic, differ)),
               ("copies of no committed source record", _at(topic, unknown)),
               ("lost in gaps", tuple(f"{topic}[{p}]@{first}..{last}" for p, first, last in in_gaps[:SAMPLE])))
    return CopyCheck(subject, exact, len(source), len(missing), len(twice), len(differ), len(unknown),
                     sum(last - first + 1 for _, first, last in in_gaps), samples)
