r"""Broker metric names from either JMX exporter rule set, as Conveyor's readers know them. Pure.

Conveyor reads brokers' metrics by the names its own exporter rules give them
(``conveyor/runtime/jmx-exporter.yaml``). Clusters run by Strimzi are usually scraped under the rules
of Strimzi's example ``packaging/examples/metrics/kafka-metrics.yaml``, which name some of the same
MBeans differently. Every reader of the brokers' series in Prometheus passes the names through this
module: the queries of the watcher, the balancer, the advisor and the throttle select either name
and read them as ours (``conveyor.ops.broker_readings``), and so do the alerting rules
(``conveyor.ops.rules.kafka``). So health, loads, the advisor, the throttle controller
and the alerts each see one name per metric whichever rules printed the page, and this table is
the only place that knows both.

How the two rule sets differ, for every metric Conveyor reads (derived from Strimzi's rules, not
from what a Strimzi cluster happened to print):

- Meters (``...PerSec`` MBeans, ``Count`` attribute, counters with ``_total``): Strimzi's rule
  ``name=(.+)PerSec\w*`` drops ``PerSec`` and ours keep it, so Strimzi's
  ``kafka_server_brokertopicmetrics_bytesin_total{topic}`` is our
  ``kafka_server_brokertopicmetrics_bytesinpersec_total{topic}``. Same counter, same ``topic`` label.
- Gauges (``Value`` attribute): the same names. Both lowercase the output name and build it as
  ``kafka_<domain>_<type>_<name>``, with ``-`` made ``_`` (``max-dirty-percent``); ``kafka.log``
  sizes carry ``topic`` and ``partition`` on both sides.
- Label names: Strimzi does not set ``lowercaseOutputLabelNames``, so the follower lag's
  ``clientId`` is our ``clientid``.

Nothing equivalent in Strimzi's rules (the readers see None and the rules over them stay quiet):

- ``kafka.network:type=RequestMetrics`` (request p99 for KafkaRequestSlow and the throttle
  controller): Strimzi's file has excluded it since its pull request #13139; earlier versions of
  that file printed it under our name (``..._totaltimems{request,quantile}``), which needs no
  mapping.
- ``kafka.server:type=group-coordinator-metrics`` (coordinator load time, offset commit rate and count): it
  has no ``name`` key, which all of Strimzi's generic rules want, and no rule of theirs names it.
- ``kafka.coordinator.group:type=GroupMetadataManager`` (groups and offsets held): Strimzi's
  domain pattern ``kafka.(\w+)`` cannot match the dotted domain.
"""

from __future__ import annotations

from collections.abc import Mapping

_TOTAL = "_total"

#: Metrics Conveyor reads that both rule sets name alike (gauges of a ``Value`` attribute).
SAME: tuple[str, ...] = (
    "kafka_server_replicamanager_underreplicatedpartitions",
    "kafka_server_replicamanager_underminisrpartitioncount",
    "kafka_server_replicamanager_leadercount",
    "kafka_server_replicamanager_partitioncount",
    "kafka_controller_kafkacontroller_offlinepartitionscount",
    "kafka_controller_kafkacontroller_activecontrollercount",
    "kafka_log_logcleanermanager_max_dirty_percent",
    "kafka_log_logcleanermanager_time_since_last_run_ms",
    "kafka_server_replicafetchermanager_maxlag",
    "kafka_log_log_size",
)

#: Metrics Conveyor reads, our name -> Strimzi's: the meters, whose "PerSec" Strimzi drops.
RENAMED: Mapping[str, str] = {
    "kafka_server_replicamanager_isrshrinkspersec_total": "kafka_server_replicamanager_isrshrinks_total",
    "kafka_server_replicamanager_isrexpandspersec_total": "kafka_server_replicamanager_isrexpands_total",
    "kafka_server_brokertopicmetrics_bytesinpersec_total": "kafka_server_brokertopicmetrics_bytesin_total",
    "kafka_server_brokertopicmetrics_bytesoutpersec_total": "kafka_server_brokertopicmetrics_bytesout_total",
    "kafka_server_brokertopicmetrics_messagesinpersec_total": "kafka_server_brokertopicmetrics_messagesin_total",
    "kafka_controller_controllerstats_uncleanleaderelectionspersec_total":
        "kafka_controller_controllerstats_uncleanleaderelections_total",
}

#: Metrics Conveyor reads that no rule of Strimzi's exports (module docstring).
MISSING: tuple[str, ...] = (
    "kafka_network_requestmetrics_totaltimems",
    "kafka_server_group_coordinator_metrics_partition_load_time_max",
    "kafka_server_group_coordinator_metrics_offset_commit_rate",
    "kafka_server_group_coordinator_metrics_offset_commit_count",
    "kafka_coordinator_group_groupmetadatamanager_numgroups",
    "kafka_coordinator_group_groupmetadatamanager_numoffsets",
)

#: Per metric (our name), Strimzi's label names -> ours, where they differ.
STRIMZI_LABELS: Mapping[str, Mapping[str, str]] = {
    "kafka_server_replicafetchermanager_maxlag": {"clientId": "clientid"},
}

# prometheus_client's parser names a counter's family without ``_total`` and its samples with it;
# both forms are looked up, so a family keeps matching its samples.
_OURS = {**{theirs: ours for ours, theirs in RENAMED.items()},
         **{theirs.removesuffix(_TOTAL): ours.removesuffix(_TOTAL) for ours, theirs in RENAMED.items()}}


def canonical_name(name: str) -> str:
    """Our name for a sample's or a family's name; any other name unchanged."""
    return _OURS.get(name, name)


def canonical_labels(name: str, labels: Mapping[str, str]) -> Mapping[str, str]:
    """``labels`` of the sample our name ``name``, with Strimzi's label names made ours."""
    renames = STRIMZI_LABELS.get(name)
    if not renames or renames.keys().isdisjoint(labels):
        return labels
    return {renames.get(key, key): value for key, value in labels.items()}
