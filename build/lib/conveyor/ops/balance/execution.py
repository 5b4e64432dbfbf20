"""A plan on its way to a cluster: batches, progress, and the check that the cluster still is
the one the plan was made for. Pure: no Kafka, no files (the executor saves it as JSON).

An :class:`Execution` records the replica lists of every partition the plan looked at
(``before``), the new lists of the partitions it changes (``target``), the batches they move in
and how far the moves got. It is saved after every step, so an interrupted ``balance execute``
resumes at the batch it was in. :func:`drift` is the refusal rule: every partition must hold the
replicas the execution expects at this point (the old list before its batch, the new one after
it, either or a mix of both while its batch is in flight); anything else means someone changed
the cluster since the plan was made, and the plan is not applied. Leaders are not compared: they
move on their own (failures, elections), replica lists do not.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from conveyor.ops.balance.planner import Plan

TopicPartition = tuple[str, int]
Assignment = Mapping[TopicPartition, tuple[int, ...]]


def fingerprint(assignment: Assignment) -> str:
    """A short digest of replica lists (order included: the first replica is the preferred leader)."""
    digest = hashlib.sha256()
    for (topic, number), replicas in sorted(assignment.items()):
        digest.update(f"{topic}\0{number}\0{','.join(map(str, replicas))}\n".encode())
    return digest.hexdigest()[:16]


def make_batches(sizes: Mapping[TopicPartition, int], max_partitions: int,
                 max_bytes: int | None) -> tuple[tuple[TopicPartition, ...], ...]:
    """Partitions in batches of at most ``max_partitions`` and ``max_bytes`` to copy (a partition
    larger than ``max_bytes`` goes alone). Cheapest first, so leadership-only changes and small
    partitions finish early and a large move never holds up many small ones."""
    if max_partitions < 1:
        raise ValueError("a batch holds at least one partition")
    batches: list[tuple[TopicPartition, ...]] = []
    current: list[TopicPartition] = []
    used = 0
    for tp in sorted(sizes, key=lambda t: (sizes[t], t)):
        size = sizes[tp]
        if current and (len(current) >= max_partitions or (max_bytes is not None and used + size > max_bytes)):
            batches.append(tuple(current))
            current, used = [], 0
        current.append(tp)
        used += size
    if current:
        batches.append(tuple(current))
    return tuple(batches)


@dataclass(frozen=True)
class Drift:
    """A partition whose replicas are not what the execution expects."""

    partition: TopicPartition
    expected: tuple[tuple[int, ...], ...]
    #: None: the partition no longer exists.
    actual: tuple[int, ...] | None

    def __str__(self) -> str:
        wanted = " or ".join(str(list(e)) for e in self.expected)
        found = "gone" if self.actual is None else str(list(self.actual))
        return f"{self.partition[0]}-{self.partition[1]}: expected replicas {wanted}, found {found}"


def _frozen(assignment: Assignment) -> Mapping[TopicPartition, tuple[int, ...]]:
    return MappingProxyType({tp: tuple(r) for tp, r in assignment.items()})


@dataclass(frozen=True)
class Execution:
    cluster: str
    #: Fingerprint of ``before``: names the cluster state the plan was made for.
    fingerprint: str
    created_at: str
    before: Mapping[TopicPartition, tuple[int, ...]]
    target: Mapping[TopicPartition, tuple[int, ...]]
    #: Bytes each changed partition copies.
    sizes: Mapping[TopicPartition, int]
    batches: tuple[tuple[TopicPartition, ...], ...]
    #: Partitions whose leader should change even where the replica list does not.
    elections: tuple[TopicPartition, ...]
    #: Replication throttle in bytes/s while a batch moves; None: unthrottled.
    throttle: int | None
    #: Batches completed; batch ``done`` is next (or in flight when ``in_flight``).
    done: int = 0
    in_flight: bool = False
    elected: bool = False
    stats: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "before", _frozen(self.before))
        object.__setattr__(self, "target", _frozen(self.target))
        object.__setattr__(self, "sizes", MappingProxyType(dict(self.sizes)))
        object.__setattr__(self, "stats", MappingProxyType(dict(self.stats)))

    @property
    def finished(self) -> bool:
        return self.done == len(self.batches) and self.elected

    @property
    def bytes_to_move(self) -> int:
        return sum(self.sizes.values())

    def batch(self, index: int) -> dict[TopicPartition, tuple[int, ...]]:
        return {tp: self.target[tp] for tp in self.batches[index]}

    def batch_bytes(self, index: int) -> int:
        return sum(self.sizes[tp] for tp in self.batches[index])

    def rebatched(self, throttle: int | None, max_partitions: int, max_bytes: int | None) -> Execution:
        """The same plan, from the start, with other batches and throttle (a saved plan's run)."""
        return replace(self, throttle=throttle, batches=make_batches(self.sizes, max_partitions, max_bytes),
                       done=0, in_flight=False, elected=False)

    def started(self) -> Execution:
        return replace(self, in_flight=True)

    def completed_batch(self) -> Execution:
        return replace(self, done=self.done + 1, in_flight=False)

    def completed_elections(self) -> Execution:
        return replace(self, elected=True)

    def expected(self, tp: TopicPartition) -> tuple[tuple[int, ...], ...]:
        """Replica lists ``tp`` may hold now, given the progress."""
        before, after = self.before[tp], self.target.get(tp)
        if after is None:
            return (before,)
        index = next(i for i, batch in enumerate(self.batches) if tp in batch)
        if index < self.done:
            return (after,)
        if index == self.done and self.in_flight:
            return (before, after)
        return (before,)

    # -- JSON ------------------------------------------------------------------------------------

    def to_json(self) -> str:
        def listing(assignment: Mapping[TopicPartition, Sequence[int]]) -> list:
            return [[t, p, list(r)] for (t, p), r in sorted(assignment.items())]

        return json.dumps({
            "version": 1, "cluster": self.cluster, "fingerprint": self.fingerprint, "created_at": self.created_at,
            "throttle": self.throttle, "done": self.done, "in_flight": self.in_flight, "elected": self.elected,
            "stats": dict(self.stats), "before": listing(self.before), "target": listing(self.target),
            "sizes": [[t, p, s] for (t, p), s in sorted(self.sizes.items())],
            "batches": [[[t, p] for t, p in batch] for batch in self.batches],
            "elections": [[t, p] for t, p in self.elections],
        }, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Execution:
        data = json.loads(text)
        if data.get("version") != 1:
            raise ValueError(f"unknown plan file version {data.get('version')!r}")
        return cls(
            cluster=data["cluster"], fingerprint=data["fingerprint"], created_at=data["created_at"],
            before={(t, p): tuple(r) for t, p, r in data["before"]},
            target={(t, p): tuple(r) for t, p, r in data["target"]},
            sizes={(t, p): s for t, p, s in data["sizes"]},
            batches=tuple(tuple((t, p) for t, p in batch) for batch in data["batches"]),
            elections=tuple((t, p) for t, p in data["elections"]),
            throttle=data["throttle"], done=data["done"], in_flight=data["in_flight"],
            elected=data["elected"], stats=data.get("stats", {}),
        )


def new_execution(cluster: str, plan: Plan, before: Assignment, created_at: str, throttle: int | None,
                  max_partitions: int = 10, max_bytes: int | None = None) -> Execution:
    """The execution of ``plan``, made from the replica lists ``before`` it was planned on."""
    sizes = {(c.topic, c.partition): c.bytes_to_move for c in plan.changes}
    ratios = {f"{name}_max_over_mean_{when}": load.max_over_mean
              for when, table in (("before", plan.stats_before), ("after", plan.stats_after))
              for name, load in table.items()}
    return Execution(
        cluster=cluster, fingerprint=fingerprint(before), created_at=created_at, before=before,
        target=plan.assignment(), sizes=sizes, batches=make_batches(sizes, max_partitions, max_bytes),
        elections=tuple(plan.elections), throttle=throttle, stats=ratios,
    )


def drift(execution: Execution, current: Assignment) -> list[Drift]:
    """Partitions that do not hold what ``execution`` expects at its progress (see module doc).

    While a batch is in flight Kafka lists the union of old and new replicas, so any list drawn
    from both is accepted for the partitions of that batch.
    """
    found = []
    for tp in sorted(execution.before):
        expected, actual = execution.expected(tp), current.get(tp)
        if actual is None:
            found.append(Drift(tp, expected, None))
        elif actual in expected:
            continue
        elif len(expected) == 2 and set(actual) <= set(expected[0]) | set(expected[1]):
            continue
        else:
            found.append(Drift(tp, expected, actual))
    return found
