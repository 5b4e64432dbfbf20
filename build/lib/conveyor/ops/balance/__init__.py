"""Balance planning: where replicas and leaders should go. Pure: no Kafka, no I/O.

Cruise Control's design in Python: goals with ``optimize()`` and ``is_action_acceptable()``, hard
ones (live brokers, rack-awareness, isolation tags) before soft ones (replica, leader, bytes-in and
bytes-out balance, then the bytes moved), each goal judged by the goals before it. The output is a
:class:`Plan` with Kafka's reassignment JSON and the partitions that need a preferred election.

    model = ClusterModel(brokers, partitions, isolation={"payments": "money"})
    result = plan(model.add_broker(Broker(10, rack="c")))
    print(result.to_reassignment_json())
"""

from conveyor.ops.balance.errors import (
    BalanceError, HardGoalError, IsolationError, LiveBrokersError, ModelError, RackAwareError,
)
from conveyor.ops.balance.goals import (
    THRESHOLD, BytesInGoal, BytesOutGoal, Goal, IsolationGoal, LeaderCountGoal, LiveBrokersGoal,
    RackAwareGoal, ReplicaCountGoal, ResourceGoal,
)
from conveyor.ops.balance.model import (
    Broker, ClusterModel, ClusterState, LeadershipMove, Partition, ReplicaMove,
)
from conveyor.ops.balance.planner import (
    BrokerLoad, LoadStats, MinimalMovementGoal, Move, PartitionChange, Plan, default_goals, plan,
)

__all__ = [
    "BalanceError", "Broker", "BrokerLoad", "BytesInGoal", "BytesOutGoal", "ClusterModel",
    "ClusterState", "Goal", "HardGoalError", "IsolationError", "IsolationGoal", "LeaderCountGoal",
    "LeadershipMove", "LiveBrokersError", "LiveBrokersGoal", "LoadStats", "MinimalMovementGoal",
    "ModelError", "Move", "Partition", "PartitionChange", "Plan", "RackAwareError", "RackAwareGoal",
    "ReplicaCountGoal", "ReplicaMove", "ResourceGoal", "THRESHOLD", "default_goals", "plan",
]
