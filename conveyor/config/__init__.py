"""The platform model: one typed, validated view of ``platform.yaml``.

Every part of Conveyor reads the platform as this model; none parses YAML itself. The CLI loads it
with :func:`load_resolved_platform`: platform.yaml with the view `conveyor up` writes of what it
started laid over it (:mod:`conveyor.config.resolved`), so that code below the CLI finds every
endpoint and credential in the model.
Validation happens in two passes so that one bad file yields every problem at once, each with its
path inside the file: pydantic checks shapes and ranges (a module per section), then
:mod:`conveyor.config.checks` checks the references between sections (a topic's replication
against each cluster's brokers, a route's clusters, the services a topic names).
"""

from conveyor.config.clusters import Cluster, ClusterRole, MetricsPage, Part, Purpose, ReplicationDefaults, Security
from conveyor.config.contract_files import ContractFileError, read_contract
from conveyor.config.contracts import Compatibility, Contracts
from conveyor.config.dispatch import Dispatch
from conveyor.config.gateway import Gateway
from conveyor.config.loading import load_platform, parse_platform
from conveyor.config.ops import Ops, OpsPanel, PanelQuery
from conveyor.config.pipeline import Catalog, FieldMatch, Lake, Pipeline, Realtime, RealtimeView, Spark, ViewMetric
from conveyor.config.platform import Platform
from conveyor.config.problems import ConfigError, NotSetError, Problem
from conveyor.config.resolved import load_resolved_platform
from conveyor.config.runtime import Postgres, Redis, Runtime
from conveyor.config.topics import CleanupPolicy, Delivery, ReplicationMode, Route, Service, Topic
from conveyor.config.units import DEFAULT_PLATFORM_FILE, duration_text, parse_duration_ms, parse_size_bytes

__all__ = [
    "Catalog", "DEFAULT_PLATFORM_FILE", "CleanupPolicy", "Cluster", "ClusterRole", "Compatibility", "ConfigError",
    "ContractFileError", "Contracts",
    "Delivery",
    "Dispatch", "FieldMatch", "Gateway", "Lake", "MetricsPage", "NotSetError", "Ops", "OpsPanel", "PanelQuery", "Part", "Pipeline",
    "Platform", "Postgres", "Problem", "Purpose", "Realtime", "RealtimeView", "Redis", "ReplicationDefaults", "ReplicationMode",
    "Route", "Runtime", "Security", "Service", "Spark", "Topic", "ViewMetric", "load_platform",
    "load_resolved_platform", "duration_text", "parse_duration_ms", "parse_platform", "parse_size_bytes", "read_contract",
]
