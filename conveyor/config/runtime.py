"""``runtime:``: how ``conveyor up`` runs local clusters and Redis on this machine."""

from __future__ import annotations

from pydantic import Field

from conveyor.config.units import Model, Secret, Seconds


class Redis(Model):
    enabled: bool = True
    port: int | None = Field(default=None, ge=1024, le=65535, description="default: base_port - 1")
    #: An existing Redis instead of a local one (``${ENV_VAR}`` or ``file:PATH`` when it holds a password).
    url: Secret | None = None


class Postgres(Model):
    """A local PostgreSQL (Debian's package) for the lake's JDBC catalog, on 127.0.0.1."""

    port: int = Field(ge=1024, le=65535)
    user: str = Field(default="conveyor", pattern=r"^[a-z_][a-z0-9_]*$")
    database: str = Field(default="conveyor", pattern=r"^[a-z_][a-z0-9_]*$")


class Prometheus(Model):
    """A local Prometheus (Debian's ``prometheus``) that scrapes every component and broker and
    evaluates the rules of ``conveyor ops rules``, on 127.0.0.1."""

    port: int = Field(default=18060, ge=1024, le=65535)
    #: Seconds between scrapes, and between rule evaluations.
    interval: Seconds = Field(default=15.0, ge=1)
    #: How long its samples are kept (Prometheus's duration syntax).
    retention: str = Field(default="2d", pattern=r"^\d+[smhdwy]$")


class NodeExporter(Model):
    """This machine's node_exporter (Debian's ``prometheus-node-exporter``), with only the
    collectors the host rules read, on 127.0.0.1: the local Prometheus scrapes it for the local
    brokers' host."""

    port: int = Field(default=18061, ge=1024, le=65535)


class Alertmanager(Model):
    """A local Alertmanager (Debian's ``prometheus-alertmanager``) that takes Prometheus's alerts
    and routes them to ``ops.notify_url``, on 127.0.0.1."""

    port: int = Field(default=18063, ge=1024, le=65535)
    #: How long a new group of alerts waits for more before its first notification.
    group_wait: Seconds = Field(default=30.0, ge=0)
    #: Before a group's changes are notified again, and before a still-firing group is repeated.
    group_interval: Seconds = Field(default=300.0, gt=0)
    repeat_interval: Seconds = Field(default=14400.0, gt=0)


class Runtime(Model):
    """How ``conveyor up`` runs local clusters on this machine."""

    #: Folder for data, logs and pid files, relative to platform.yaml.
    home: str = ".conveyor"
    #: First port; each node takes three consecutive ports (client, controller, metrics).
    base_port: int = Field(default=19092, ge=1025, le=65000)
    broker_heap: str = Field(default="320m", pattern=r"^\d+[mg]$")
    controller_heap: str = Field(default="160m", pattern=r"^\d+[mg]$")
    #: Seconds to wait for every cluster to report all its brokers.
    start_timeout: float = Field(default=120.0, gt=0)
    redis: Redis = Field(default_factory=Redis)
    #: Started by ``conveyor up`` only when set.
    postgres: Postgres | None = None
    prometheus: Prometheus | None = None
    node_exporter: NodeExporter | None = None
    alertmanager: Alertmanager | None = None
