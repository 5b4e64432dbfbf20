"""The throttle service: ``ops throttle``'s controller, a round every interval until SIGTERM.

Typed config in, a :class:`conveyor.service.Loop` out for :func:`conveyor.service.serve`, as the
lake's scheduler and the real-time service. Decisions and rounds go to the caller's callbacks, besides
what the controller records (its log, decisions file and metrics).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from conveyor.config import Platform
from conveyor.ops.throttle.controller import ThrottleController
from conveyor.ops.throttle.policy import Decision, Round, ThrottlePolicy
from conveyor.service import Loop


@dataclass(frozen=True)
class ThrottleConfig:
    platform: Platform
    cluster: str
    policy: ThrottlePolicy
    #: Seconds between rounds.
    interval: float = 15.0


class ThrottleService(Loop):
    """/healthz names the cluster and counts the quotas the controller keeps."""

    def __init__(self, config: ThrottleConfig, on_decision: Callable[[Decision], None],
                 on_round: Callable[[Round], None]) -> None:
        self.controller = ThrottleController(config.platform, config.cluster, config.policy, on_decision=on_decision)
        super().__init__(self.controller.metrics.registry, self._rounds, self._health)
        self.config = config
        self._on_round = on_round

    def once(self) -> None:
        """One round, outside :func:`conveyor.service.serve` (for cron and tests)."""
        try:
            self._on_round(self.controller.cycle())
        finally:
            self.controller.close()

    def _rounds(self, stop: threading.Event) -> int:
        try:
            self.controller.run(self.config.interval, stop, self._on_round)
        finally:
            self.controller.close()
        return 0

    def _health(self) -> tuple[bool, dict[str, Any]]:
        return True, {"cluster": self.config.cluster, "quotas": len(self.controller.state.quotas)}
