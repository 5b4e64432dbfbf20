"""The goal interface every balancing goal implements, and the band every soft goal aims for."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from conveyor.ops.balance.model import Action, ClusterState

#: Target max/mean per load, and the share of the slack the planner aims for (Cruise Control's
#: balance margin) so that small later changes stay inside the threshold.
THRESHOLD = 1.10
MARGIN = 0.9


class Goal(ABC):
    name: str = ""
    hard: bool = False

    def check_feasible(self, state: ClusterState) -> None:
        """Raise the goal's error if no placement can meet it (cheap counting, before planning)."""

    def violations(self, state: ClusterState) -> list[int]:
        """Partitions that break a hard goal now."""
        return []

    @abstractmethod
    def optimize(self, state: ClusterState, accepted_by: Sequence[Goal]) -> None:
        """Change ``state`` towards the goal with actions acceptable to every goal in ``accepted_by``."""

    @abstractmethod
    def is_action_acceptable(self, action: Action, state: ClusterState) -> bool:
        """May a lower-priority goal take ``action`` without undoing this goal's work?"""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def accepts(goals: Sequence[Goal], action: Action, state: ClusterState) -> bool:
    for goal in goals:
        if not goal.is_action_acceptable(action, state):
            return False
    return True

