"""``ops:``: the operations watcher and its dashboard."""

from __future__ import annotations

import re
from typing import Literal, get_args

from pydantic import Field, model_validator

from conveyor.config.edge import DashboardConnections
from conveyor.config.machines import Machines
from conveyor.config.policies import RewindPolicy
from conveyor.config.tls import Tls
from conveyor.config.tokens import TokenHash
from conveyor.config.units import Model, Name, Secret, Seconds, SizeBytes, is_reference

#: The offset judging's own defaults: ``amplification`` below only exposes it.
_REWIND = RewindPolicy()


class PanelQuery(Model):
    """One PromQL expression of a panel, asked of Prometheus over the panel's range; each series of
    its answer is one line of the panel."""

    expr: str = Field(min_length=1)
    #: The line's name, Prometheus's legend format: ``{{route}}`` is the series' route label; empty
    #: names it by its labels.
    legend: str = ""
    #: Shown after each value (``s``, ``B/s``, ``/s``, ``ratio``); empty for plain numbers.
    unit: str = ""
    #: The values are the end of the last complete hour (unix seconds; the lake's
    #: ``conveyor_lake_complete_until_timestamp_seconds``): drawn as a day's strip of hours,
    #: complete or not, instead of a line.
    strip: bool = False


class OpsPanel(Model):
    """A dashboard panel: PromQL asked of Prometheus (interface in docs/ops.md, "Panels")."""

    title: str = Field(min_length=1)
    queries: list[PanelQuery] = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _not_globs(cls, data: object) -> object:
        # The panels were once filled from scraped pages by metric globs; say what replaces them
        # rather than "not a known setting".
        if isinstance(data, dict) and ("metrics" in data or "by" in data):
            raise ValueError("`metrics` and `by` are gone: the panels ask Prometheus now; write "
                             "`queries: [{expr: 'sum by (route) (conveyor_replicate_lag_records)', "
                             "legend: '{{route}}'}]` (docs/ops.md, \"Panels\")")
        return data


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
    #: Points kept per consumer group, and asked per panel series, for the dashboard's sparklines.
    history: int = Field(default=120, ge=2, le=10_000)
    #: Optional lag thresholds that turn an otherwise OK partition into WARN.
    max_lag_records: int | None = Field(default=None, ge=0)
    max_lag_seconds: Seconds | None = Field(default=None, ge=0)
    #: Regular expressions over group ids that are not watched (tools, tests).
    exclude_groups: list[str] = Field(default_factory=list)
    #: Request time p99 (Produce, FetchConsumer, Metadata): warning above, alarm above (10 s by
    #: default).
    request_p99_warn: Seconds = Field(default=1.0, gt=0)
    request_p99_alarm: Seconds = Field(default=10.0, gt=0)
    #: How long a broker must not answer before the rules file's KafkaBrokerDown pages (Prometheus's
    #: ``for``).
    broker_down_hold: Seconds = Field(default=60.0, ge=0)
    #: Load skew across brokers (max over mean) above this is a warning.
    skew_warn: float = Field(default=1.5, gt=1)
    #: Byte rates below this per broker (mean) are too small for skew to matter.
    skew_min_bytes: SizeBytes = 1_048_576
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
    #: offsets_dirty_hold is a stalled compaction (the cleaner compacts a log once it passes
    #: min.cleanable.dirty.ratio, 50 % for __consumer_offsets); the cleaner not run for
    #: cleaner_idle_alarm is a dead cleaner (it looks for work every log.cleaner.backoff.ms, 15 s);
    #: a __consumer_offsets partition load above coordinator_load_warn is slow.
    offsets_dirty_warn: float = Field(default=80.0, gt=0, le=100)
    offsets_dirty_hold: Seconds = Field(default=300.0, gt=0)
    cleaner_idle_alarm: Seconds = Field(default=900.0, gt=0)
    coordinator_load_warn: Seconds = Field(default=10.0, gt=0)
    #: Where the local Alertmanager (``runtime.alertmanager``) sends every alert, firing and
    #: resolved, in its webhook shape (a chat hook, an incident tool); none by default.
    #: May be ``${ENV_VAR}`` or ``file:PATH`` (a hook's URL often holds its secret); masked when shown.
    notify_url: Secret | None = None
    #: The Alertmanager whose alerts the dashboard, ``ops alerts`` and ``ops silence`` show and
    #: change; with ``runtime.alertmanager`` set, the local one.
    alertmanager_url: str | None = Field(default=None, pattern=r"^https?://")
    #: Component name -> its /metrics URL, scraped by the local Prometheus (which the panels ask):
    #: ``http(s)://`` (a service, a node_exporter) or ``file:PATH`` (a batch job's last figures,
    #: which the watcher serves for Prometheus to scrape).
    components: dict[Name, str] = Field(default_factory=dict)
    #: The parts this platform keeps running: each gets a critical alert when no instance of it
    #: reports to Prometheus for 5 minutes (ConveyorComponentAbsent*). Leave out a part that runs
    #: only now and then, or not at all. Default: every part.
    running: list[RunningPart] = Field(default_factory=lambda: list(get_args(RunningPart)))
    machines: Machines = Field(default_factory=Machines)
    #: The Prometheus the dashboard's panels ask (its HTTP API); with none, the local one
    #: ``runtime.prometheus`` starts.
    prometheus_url: str | None = Field(default=None, pattern=r"^https?://")
    #: How far back the panels' lines reach, in ``history`` points.
    panel_range: Seconds = Field(default=3600.0, gt=0)
    #: Name -> panel; None: the default panels (conveyor.ops.dashboard.DEFAULT_PANELS, listed in
    #: docs/ops.md). Set, they replace the defaults.
    panels: dict[Name, OpsPanel] | None = None

    @model_validator(mode="before")
    @classmethod
    def _no_own_posts(cls, data: object) -> object:
        # The watcher once posted its own alerts, retrying each post this many times.
        if isinstance(data, dict) and "notify_attempts" in data:
            raise ValueError("`notify_attempts` is gone: every alert goes through Prometheus and Alertmanager, "
                             "which retries its receivers; remove the setting")
        return data

    @model_validator(mode="after")
    def _valid(self) -> Ops:
        if self.request_p99_warn > self.request_p99_alarm:
            raise ValueError("request_p99_warn must not be above request_p99_alarm")
        if self.notify_url is not None and not is_reference(self.notify_url) \
                and not self.notify_url.get_secret_value().startswith(("http://", "https://")):
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
