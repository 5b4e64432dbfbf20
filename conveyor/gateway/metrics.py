"""The gateway's Prometheus metrics (names documented in docs/gateway.md), on a registry of its own so
that several gateways in one process (tests) never share counters."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class GatewayMetrics:
    def __init__(self, dc: str) -> None:
        self.registry = CollectorRegistry()
        labels = {"registry": self.registry}
        self.accepted = Counter("conveyor_gateway_events_accepted", "Events acknowledged by Kafka and answered 200",
                                ["topic", "cluster"], **labels)
        self.rejected = Counter("conveyor_gateway_requests_rejected", "Requests refused, by reason",
                                ["topic", "reason"], **labels)
        self.latency = Histogram("conveyor_gateway_request_seconds", "Time from request to answer", ["topic"],
                                 buckets=(.001, .0025, .005, .01, .02, .05, .1, .25, .5, 1, 2.5, 5, 10, 30),
                                 **labels)
        self.failovers = Counter("conveyor_gateway_failovers", "Switches of the cluster written to",
                                 ["from_cluster", "to_cluster"], **labels)
        self.failed_over = Gauge("conveyor_gateway_failed_over", "1 while the gateway writes to a cluster other "
                                 "than its data centre's", **labels)
        self.active_cluster = Gauge("conveyor_gateway_active_cluster", "1 for the cluster being written to",
                                    ["cluster"], **labels)
        self.lane_occupied = Gauge("conveyor_gateway_lane_requests", "Requests in each bulkhead lane", ["lane"],
                                   **labels)
        self.shed = Counter("conveyor_gateway_events_shed", "Events a logs cluster did not acknowledge within "
                            "gateway.logs_wait: answered as shed, not accepted", ["topic", "cluster"], **labels)
        self.topic_requests = Counter("conveyor_gateway_topic_requests", "Topic requests (POST /v1/topics), by "
                                      "outcome: granted or the refusal's reason", ["outcome"], **labels)
