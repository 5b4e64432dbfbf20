"""Errors of the balance planner.

Callers branch on the class and its fields (``goal``, ``partitions``, ``brokers``), never on the
message text; the message is for the operator and says what blocks the goal.
"""

from __future__ import annotations

from collections.abc import Iterable

from conveyor.errors import ConveyorError


class BalanceError(ConveyorError):
    """The root of every balance-planning error."""


class ModelError(BalanceError):
    """The cluster model handed to the planner is inconsistent (duplicate ids, replicas, loads)."""

    exit_code = 2


class HardGoalError(BalanceError):
    """A hard goal cannot be met; no plan is produced.

    ``partitions`` are the (topic, partition) pairs that block the goal and ``brokers`` the broker
    ids that matter to the reason (the tagged brokers, the brokers of each rack, the dead brokers).
    """

    def __init__(
        self,
        goal: str,
        reason: str,
        *,
        partitions: Iterable[tuple[str, int]] = (),
        brokers: Iterable[int] = (),
    ) -> None:
        self.goal = goal
        self.reason = reason
        self.partitions = tuple(partitions)
        self.brokers = tuple(sorted(set(brokers)))
        super().__init__(f"hard goal {goal} cannot be met: {reason}")


class LiveBrokersError(HardGoalError):
    """Replicas cannot all be placed on live brokers (too few live brokers for the replicas)."""

    @classmethod
    def too_few(cls, partitions: list[tuple[str, int]], live: list[int]) -> LiveBrokersError:
        return cls("LiveBrokers", f"{describe_partitions(partitions)} have more replicas than the "
                   f"{len(live)} live broker(s) {live}", partitions=partitions, brokers=live)


class RackAwareError(HardGoalError):
    """Replicas of a partition cannot sit on distinct racks (fewer racks than replicas)."""

    @classmethod
    def too_few(cls, partitions: list[tuple[str, int]], factor: int,
                racks: dict[str, list[int]]) -> RackAwareError:
        listing = "; ".join(f"rack {r}: brokers {sorted(ids)}" for r, ids in sorted(racks.items()))
        return cls("RackAware", f"{describe_partitions(partitions)} have {factor} replicas but the brokers "
                   f"that may hold them span only {len(racks)} rack(s) ({listing})",
                   partitions=partitions, brokers=[b for ids in racks.values() for b in ids])


class IsolationError(HardGoalError):
    """An isolated topic cannot be placed on its tagged brokers (tag on too few live brokers)."""

    @classmethod
    def too_few(cls, topic: str, tag: str, tagged: list[int], factor: int,
                partitions: list[tuple[str, int]]) -> IsolationError:
        return cls("Isolation", f"topic {topic!r} is isolated on tag {tag!r}, which {len(tagged)} live "
                   f"broker(s) carry ({tagged}), fewer than its replication factor {factor}",
                   partitions=partitions, brokers=tagged)


def describe_partitions(partitions: Iterable[tuple[str, int]], limit: int = 8) -> str:
    """``clicks-0, clicks-3 (+12 more)``: a short, readable list for an error message."""
    items = sorted(set(partitions))
    shown = ", ".join(f"{topic}-{number}" for topic, number in items[:limit])
    return shown + (f" (+{len(items) - limit} more)" if len(items) > limit else "")


class StalePlanError(BalanceError):
    """The cluster no longer holds the replicas the plan was made for; nothing is applied.

    ``drift`` lists the partitions that differ (:class:`~conveyor.ops.balance.execution.Drift`).
    """

    def __init__(self, cluster: str, drift: list) -> None:
        self.cluster, self.drift = cluster, tuple(drift)
        shown = "\n".join(f"  {d}" for d in self.drift[:10])
        more = f"\n  (+{len(self.drift) - 10} more)" if len(self.drift) > 10 else ""
        super().__init__(f"cluster {cluster} changed since the plan was made ({len(self.drift)} partition(s) "
                         f"differ); make a new plan with `conveyor balance plan`:\n{shown}{more}")


class ExecutionError(BalanceError):
    """Applying a plan stopped (a batch timed out, an election failed); the state file keeps the
    progress, and running ``balance execute`` again resumes."""
