"""Balancing goals in the manner of Cruise Control's ``analyzer/goals/Goal.java``.

A goal is an object with :meth:`Goal.optimize` and :meth:`Goal.is_action_acceptable`. Goals run in
priority order; every action a goal takes must be acceptable to all the goals before it, so a later
goal never undoes what an earlier one achieved. Hard goals raise a
:class:`~conveyor.ops.balance.errors.HardGoalError` when they cannot be met; soft goals do what
they can.

A soft goal balances one load within a band around the mean (``upper = mean * 1.09`` for a 1.10
threshold): it sheds load from brokers above the band, then fills brokers below it, trying free
leadership changes before replica moves, and swaps where a move alone would break an earlier goal.
An action is only taken when it brings a broker towards the band, so a balanced cluster is left
alone. Its rule for later goals: no action may raise a broker above ``max(upper, source load)``
nor drop one below ``min(lower, destination load)``, so the goal's maximum never grows.

Modules: ``base`` (the interface), ``hard`` (live brokers, racks, isolation), ``resource`` (the band
logic every soft goal shares), ``soft`` (replica, leader, bytes-in and bytes-out balance).
"""

from conveyor.ops.balance.goals.base import MARGIN, THRESHOLD, Goal, accepts
from conveyor.ops.balance.goals.hard import IsolationGoal, LiveBrokersGoal, RackAwareGoal
from conveyor.ops.balance.goals.resource import ResourceGoal
from conveyor.ops.balance.goals.soft import BytesInGoal, BytesOutGoal, LeaderCountGoal, ReplicaCountGoal

__all__ = [
    "MARGIN", "THRESHOLD", "BytesInGoal", "BytesOutGoal", "Goal", "IsolationGoal", "LeaderCountGoal",
    "LiveBrokersGoal", "RackAwareGoal", "ReplicaCountGoal", "ResourceGoal", "accepts",
]
