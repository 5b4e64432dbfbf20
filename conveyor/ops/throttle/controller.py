"""The throttle controller: each round reads the signals, decides (``policy``), applies the quotas
with Kafka's ConfigCommand, and records every decision.

Records: one log line per decision (logger ``conveyor.throttle``), a JSON line per decision in
``<runtime.home>/throttle/<cluster>.decisions.jsonl``, and metrics for the dashboard
(``conveyor_throttle_quota_bytes_per_second{cluster,client_id}``, ``conveyor_throttle_broker_busy{cluster,broker}``,
``conveyor_throttle_decisions_total{cluster,action}``). The quotas this controller set are kept
in ``<runtime.home>/throttle/<cluster>.json``, so a restarted controller still lifts them; quotas
set by anyone else are never touched.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge

from conveyor.config import Part, Platform
from conveyor.files import replace_atomically
from conveyor.kafka_tools import KafkaTools
from conveyor.ops.throttle.policy import Action, Decision, Round, ThrottlePolicy, decide
from conveyor.ops.throttle.signals import SignalReader

log = logging.getLogger("conveyor.throttle")


@dataclass
class ThrottleState:
    #: Client id -> the consumer_byte_rate this controller set.
    quotas: dict[str, int] = field(default_factory=dict)
    busy: list[int] = field(default_factory=list)

    @classmethod
    def load(cls, path: Path) -> ThrottleState:
        if not path.is_file():
            return cls()
        data = json.loads(path.read_text())
        return cls({k: int(v) for k, v in data["quotas"].items()}, [int(b) for b in data["busy"]])

    def save(self, path: Path) -> None:
        replace_atomically(path, json.dumps({"quotas": self.quotas, "busy": self.busy}).encode())


class ThrottleMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        # A limit this controller configured, not a measurement: there is no count of bytes to take a
        # rate() of, and the value is Kafka's consumer_byte_rate, in bytes per second, as its name says.
        self.quota = Gauge("conveyor_throttle_quota_bytes_per_second", "consumer_byte_rate this controller set, "
                           "per client id", ["cluster", "client_id"], registry=self.registry)
        self.busy = Gauge("conveyor_throttle_broker_busy", "1 while the broker counts as busy",
                          ["cluster", "broker"], registry=self.registry)
        self.decisions = Counter("conveyor_throttle_decisions", "quotas set and lifted", ["cluster", "action"],
                                 registry=self.registry)
        #: Without labels, so it is on the page from the start: the rules' absent() watches it.
        self.rounds = Counter("conveyor_throttle_rounds", "Rounds of judging the brokers", registry=self.registry)


class ThrottleController:
    """One cluster's controller. Constructing it does no I/O beyond reading its state file."""

    def __init__(self, platform: Platform, cluster: str, policy: ThrottlePolicy,
                 tools: KafkaTools | None = None, metrics: ThrottleMetrics | None = None,
                 on_decision: Callable[[Decision], None] | None = None) -> None:
        platform = platform.acting_as(Part.ops)
        self.platform, self.cluster, self.policy = platform, cluster, policy
        self.tools = tools or KafkaTools(platform, cluster)
        self.metrics = metrics or ThrottleMetrics()
        self.on_decision = on_decision
        folder = platform.home / "throttle"
        self.state_file, self.log_file = folder / f"{cluster}.json", folder / f"{cluster}.decisions.jsonl"
        self.state = ThrottleState.load(self.state_file)
        self.reader = SignalReader(platform, cluster)
        self._reconciled = False

    def _reconcile(self) -> None:
        """Forget quotas of ours that someone removed by hand since we set them."""
        live = self.tools.client_quotas()
        self.state.quotas = {c: r for c, r in self.state.quotas.items() if "consumer_byte_rate" in live.get(c, {})}
        self._reconciled = True

    def cycle(self) -> Round:
        if self.state.quotas and not self._reconciled:
            self._reconcile()
        signals = self.reader.brokers()
        result = decide(signals, self.reader.consumers(), self.state.quotas, self.state.busy, self.policy)
        for decision in result.decisions:
            if decision.action is Action.SET:
                assert decision.rate is not None
                self.tools.set_consumer_quota(decision.client_id, decision.rate)
                self.state.quotas[decision.client_id] = decision.rate
            else:
                self.tools.remove_consumer_quota(decision.client_id)
                self.state.quotas.pop(decision.client_id, None)
            self.state.save(self.state_file)  # after each change: a crash never forgets a quota it set
            self._record(decision, result)
        self.state.busy = sorted(result.busy)
        self.state.save(self.state_file)
        for signal in signals:
            self.metrics.busy.labels(self.cluster, str(signal.broker)).set(1 if signal.broker in result.busy else 0)
        self.metrics.rounds.inc()
        return result

    def _record(self, decision: Decision, result: Round) -> None:
        rate = f" consumer_byte_rate={decision.rate}" if decision.rate is not None else ""
        log.info("%s quota on client %s%s: %s", decision.action.value, decision.client_id, rate, decision.reason)
        entry = {"at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "cluster": self.cluster,
                 "action": decision.action.value, "client_id": decision.client_id, "rate": decision.rate,
                 "reason": decision.reason, "busy": {str(b): why for b, why in result.busy.items()}}
        with self.log_file.open("a") as handle:
            handle.write(json.dumps(entry) + "\n")
        self.metrics.decisions.labels(self.cluster, decision.action.value).inc()
        if decision.action is Action.SET:
            self.metrics.quota.labels(self.cluster, decision.client_id).set(decision.rate or 0)
        else:
            with contextlib.suppress(KeyError):  # a quota set by an earlier run of the controller
                self.metrics.quota.remove(self.cluster, decision.client_id)
        if self.on_decision is not None:
            self.on_decision(decision)

    def run(self, interval: float, stop: threading.Event, on_round: Callable[[Round], None] | None = None) -> None:
        while not stop.is_set():
            result = self.cycle()
            if on_round is not None:
                on_round(result)
            stop.wait(interval)

    def close(self) -> None:
        self.reader.close()
