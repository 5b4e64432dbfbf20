"""``ops:``: the operations watcher and its dashboard."""

from __future__ import annotations

import re
from typing import Literal, get_args

from pydantic import Field, model_validator

from conveyor.config.edge import DashboardConnections
from conveyor.config.machines import Machines
from conveyor.config.policies import HealthPolicy, OffsetManagerPolicy, RewindPolicy
from conveyor.config.tls import Tls
from conveyor.config.tokens import TokenHash
from conveyor.config.units import Model, Name, Secret, Seconds, SizeBytes

#: The judging rules' own defaults: the settings below only expose them.
_HEALTH = HealthPolicy()
_OFFSETS = OffsetManagerPolicy()
_REWIND = RewindPolicy()


class OpsPanel(Model):
    """A dashboard panel that components fill through their /metrics (interface in docs/ops.md)."""

    title: str = Field(min_length=1)
    #: Metric family names, or globs over them (``conveyor_replicate_*lag*``); each label set is a series.
    metrics: list[str] = Field(min_length=1)
    #: Keep only these labels: series that differ in the others are summed (gauges, counter rates,
    #: histogram buckets before the p99), as Prometheus' ``sum by``; None keeps every label.
    by: list[str] | None = None


def _default_panels() -> dict[str, OpsPanel]:
    return {name: OpsPanel(title=title, metrics=metrics, by=by[0] if by else None) for name, title, metrics, *by in (
        ("gateway", "Gateway: events accepted and request time",
         ["conveyor_gateway_events_accepted", "conveyor_gateway_request_seconds"]),
        ("replication", "Replication lag and latency per route",
         ["conveyor_replicate_*lag*", "conveyor_replicate_*latency*"], ["route"]),
        ("lake", "Lake completeness per hour, rows landed, gaps",
         ["conveyor_lake_rows_landed", "conveyor_lake_gaps", "conveyor_lake_lost_records",
          "conveyor_lake_*complete*", "conveyor_audit_*"]),
        ("dispatch", "Dispatcher backlog", ["conveyor_dispatch_*backlog*"]),
        ("realtime", "Real-time view latency", ["conveyor_realtime_*latency*"]),
        ("hosts", "Broker hosts: network, disks, filesystems",
         ["node_network_receive_bytes", "node_network_transmit_bytes", "node_disk_io_time_seconds",
          "node_filesystem_avail_bytes"], ["device", "mountpoint"]),
        ("throttle", "Throttled consumers and busy brokers",
         ["conveyor_throttle_quota_bytes_per_second", "conveyor_throttle_broker_busy",
          "conveyor_throttle_decisions_total"]),
    )}


#: The long-running parts whose absence the rules watch (conveyor.ops.rules.PRESENCE).
RunningPart = Literal["gateway", "replicator", "dispatcher", "views", "lake", "watcher", "throttle"]


class Ops(Model):
    """Settings of the operations watcher (``conveyor ops watch``) and its dashboard."""

    port: int = Field(default=18070, ge=1024, le=65535, description="/metrics, /healthz, /api and the dashboard")
    #: Serve the dashboard over HTTPS (``tls: {}`` for the platform's certificate, see Tls).
    tls: Tls | None = None
    #: The dashboard's connection bounds (conveyor.edge_guard).
    connections: DashboardConnections = Field(default_factory=DashboardConnections)
    #: The credential the dashboard and /api/state ask for (Bearer, or Basic with the token as
    #: password, which a browser prompts for); None leaves them open to whoever reaches the port.
    token: TokenHash | None = None
    #: Host names the service answers to besides 127.0.0.1, localhost, ::1 and the address it listens
    #: on; a request naming any other Host is refused, so a page on a rebound DNS name cannot read it.
    hosts: list[str] = Field(default_factory=list)
    #: Seconds between samples of offsets and broker metrics.
    interval: Seconds = Field(default=5.0, gt=0)
    #: Samples per partition window (Burrow's intervals); the lag rules judge a whole window.
    window: int = Field(default=10, ge=2, le=100)
    #: Points kept per consumer group and panel series for the dashboard's sparklines.
    history: int = Field(default=120, ge=2, le=10_000)
    #: Optional lag thresholds that turn an otherwise OK partition into WARN.
    max_lag_records: int | None = Field(default=None, ge=0)
    max_lag_seconds: Seconds | None = Field(default=None, ge=0)
    #: Regular expressions over group ids that are not watched (tools, tests).
    exclude_groups: list[str] = Field(default_factory=list)
    #: Request time p99 (Produce, FetchConsumer, Metadata): warning above, alarm above (10 s by
    #: default).
    request_p99_warn: Seconds = Field(default=_HEALTH.p99_warn_ms / 1000, gt=0)
    request_p99_alarm: Seconds = Field(default=_HEALTH.p99_alarm_ms / 1000, gt=0)
    #: How long a broker must not answer before the rules file's KafkaBrokerDown pages (Prometheus's
    #: ``for``); the watcher's own broker_down alert fires at once.
    broker_down_hold: Seconds = Field(default=60.0, ge=0)
    #: Load skew across brokers (max over mean) above this is a warning.
    skew_warn: float = Field(default=_HEALTH.skew_warn, gt=1)
    #: Byte rates below this per broker (mean) are too small for skew to matter.
    skew_min_bytes: SizeBytes = int(_HEALTH.skew_min_bytes)
    #: Read rate over write rate that counts as read amplification (the incident of
    #: docs/architecture.md, section 4, was 4x).
    amplification: float = Field(default=_REWIND.amplification_threshold, gt=1)
    #: An hour of a topic must be complete in the lake this long after it ends (the rules file's
    #: LakeHourLate); 2h: yesterday has landed by 02:00.
    lake_deadline: Seconds = Field(default=7200.0, gt=0)
    #: The rules file's thresholds for the services: the gateway's request time p99 and its share of
    #: requests answered 503; redeliveries over deliveries at the dispatcher; the real-time views'
    #: event-to-Redis p99 and their share of records rejected, per kind.
    gateway_p99_warn: Seconds = Field(default=1.0, gt=0)
    gateway_error_ratio: float = Field(default=0.01, gt=0, le=1)
    dispatch_redelivery_ratio: float = Field(default=0.1, gt=0, le=1)
    realtime_p99_warn: Seconds = Field(default=60.0, gt=0)
    realtime_reject_ratio: float = Field(default=0.01, gt=0, le=1)
    #: The offset manager: the log cleaner's max dirty ratio above this percent for longer than
    #: offsets_dirty_hold is a stalled compaction; the cleaner not run for cleaner_idle_alarm is a
    #: dead cleaner; a __consumer_offsets partition load above coordinator_load_warn is slow.
    offsets_dirty_warn: float = Field(default=_OFFSETS.dirty_percent_warn, gt=0, le=100)
    offsets_dirty_hold: Seconds = Field(default=300.0, gt=0)
    cleaner_idle_alarm: Seconds = Field(default=_OFFSETS.cleaner_idle_alarm_ms / 1000, gt=0)
    coordinator_load_warn: Seconds = Field(default=_OFFSETS.coordinator_load_warn_ms / 1000, gt=0)
    #: A webhook that receives the watcher's alerts in Alertmanager's shape on every change of state
    #: (Alertmanager's own webhook receivers, a chat hook); none by default.
    #: May be ``${ENV_VAR}`` or ``file:PATH`` (a hook's URL often holds its secret); masked when shown.
    notify_url: Secret | None = None
    #: Posts tried per change before it is dropped (with back-off doubling from 0.5 s).
    notify_attempts: int = Field(default=5, ge=1, le=20)
    #: An Alertmanager's base URL: the watcher posts its alerts to its /api/v2/alerts, where they are
    #: grouped, silenced and routed with Prometheus's, instead of to notify_url. With
    #: ``runtime.alertmanager`` set, the local one, whose route ends at notify_url.
    alertmanager_url: str | None = Field(default=None, pattern=r"^https?://")
    #: Component name -> its /metrics URL, read for the panels and scraped by the local Prometheus:
    #: ``http(s)://`` (a service, a node_exporter) or ``file:PATH`` (a batch job's last figures).
    components: dict[Name, str] = Field(default_factory=dict)
    #: The parts this platform keeps running: each gets a critical alert when no instance of it
    #: reports to Prometheus for 5 minutes (ConveyorComponentAbsent*). Leave out a part that runs
    #: only now and then, or not at all. Default: every part.
    running: list[RunningPart] = Field(default_factory=lambda: list(get_args(RunningPart)))
    machines: Machines = Field(default_factory=Machines)
    panels: dict[Name, OpsPanel] = Field(default_factory=_default_panels)

    @model_validator(mode="after")
    def _valid(self) -> Ops:
        if self.request_p99_warn > self.request_p99_alarm:
            raise ValueError("request_p99_warn must not be above request_p99_alarm")
        if self.notify_url is not None and not self.notify_url.get_secret_value().startswith(("http://", "https://")):
            raise ValueError("notify_url must start with http:// or https://")
        for name, url in self.components.items():
            if not url.startswith(("http://", "https://", "file:")):
                raise ValueError(f"components: {name}'s page {url!r} is neither http(s):// nor file: (this "
                                 "machine's node_exporter is runtime.node_exporter's page)")
        for pattern in self.exclude_groups:
            try:
                re.compile(pattern)
            except re.error as err:
                raise ValueError(f"exclude_groups: {pattern!r} is not a valid regular expression: {err}") from None
        return self
