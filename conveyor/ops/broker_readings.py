"""Each Kafka node's figures, from the Prometheus that scrapes its JMX exporter.

Prometheus scrapes every node's page: `conveyor up` configures one job per node, its series
labelled ``cluster`` and ``node``, and a Prometheus of the user's (``ops.prometheus_url``) must label
its Kafka targets the same way. The watcher asks it for the latest samples of the metrics a reading
is made of, under either exporter rule set's names (conveyor.ops.exporter_names), and for ``up``,
whether each page answered its latest scrape. Turning the answers into readings is pure
(:func:`readings_from_samples`). The balancer, the partition advisor and the throttle controller
ask it the same way (:func:`node_values`): rates are Prometheus's ``rate()`` over a window.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from conveyor.config import Platform
from conveyor.ops.exporter_names import RENAMED, canonical_labels, canonical_name
from conveyor.ops.health import READ, BrokerReading, MetricSample, reading_from_samples
from conveyor.ops.prometheus import PrometheusClient, Sample

#: Labels Prometheus adds to every series of a target: not the exporter's.
_TARGET_LABELS = ("__name__", "cluster", "node", "instance", "job")
NOT_SCRAPED = "Prometheus does not scrape its metrics page (no `up` series labelled with its cluster and node)"
SCRAPE_FAILED = "its metrics page did not answer Prometheus's latest scrape"


@dataclass(frozen=True, slots=True)
class Target:
    """A node of a cluster whose metrics page Prometheus scrapes."""

    node: str
    url: str
    broker_id: int | None = None
    #: False for a dedicated controller; None when unknown (inferred from its metrics).
    broker: bool | None = None


def metrics_targets(platform: Platform, cluster: str) -> tuple[Target, ...]:
    """Every node of ``cluster`` with a metrics page in platform.yaml (`conveyor up` gives those of
    the clusters it starts)."""
    return tuple(Target(page.node or urlsplit(page.url).netloc, page.url, page.broker,
                        True if page.broker is not None else False if page.controller else None)
                 for page in platform.cluster(cluster).metrics)


def names_regex() -> str:
    """Every metric a reading is made of, under both rule sets' names, as a PromQL regex."""
    return "|".join(either_name(name) for name in sorted(READ))


def readings_from_samples(targets: Sequence[Target], at_ms: int, up: Sequence[Sample],
                          samples: Sequence[Sample]) -> list[BrokerReading]:
    """A reading per target: from its samples when its page answered the latest scrape, else the
    reason there are none."""
    answered = {s.labels.get("node"): s.value for s in up}
    by_node: dict[str | None, list[MetricSample]] = {}
    for sample in samples:
        if sample.value is None:
            continue
        name = canonical_name(sample.labels.get("__name__", ""))
        labels = {k: v for k, v in sample.labels.items() if k not in _TARGET_LABELS}
        by_node.setdefault(sample.labels.get("node"), []).append((name, canonical_labels(name, labels), sample.value))
    readings = []
    for target in targets:
        state = answered.get(target.node)
        if state == 1:
            readings.append(reading_from_samples(target.node, at_ms, by_node.get(target.node, ()), target.broker_id,
                                                 target.broker))
        else:
            readings.append(BrokerReading(target.node, at_ms, target.broker_id,
                                          NOT_SCRAPED if state is None else SCRAPE_FAILED, target.broker))
    return readings


def _quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def either_name(name: str) -> str:
    """A PromQL regex for broker metric ``name`` (our exporter rules' name) under either rule set's name."""
    theirs = RENAMED.get(name)
    return f"{name}|{theirs}" if theirs else name


def node_values(client: PrometheusClient, cluster: str, name: str, window_seconds: float | None = None
                ) -> tuple[Sample, ...]:
    """Every series of broker metric ``name`` on the nodes of ``cluster``, labelled by ``node`` and
    the metric's own labels: its latest value, or with ``window_seconds`` its per-second rate over
    that window (a counter's restart is no drop). Raises QueryError."""
    series = f'{{__name__=~"{either_name(name)}",cluster="{_quoted(cluster)}"}}'
    return client.query(f"rate({series}[{max(int(window_seconds), 1)}s])" if window_seconds else series)


def read_brokers(client: PrometheusClient, cluster: str, targets: Sequence[Target], at_ms: int) -> list[BrokerReading]:
    """The readings of ``targets``, nodes of ``cluster``. Raises QueryError."""
    selector = f'cluster="{_quoted(cluster)}"'
    up = client.query(f"up{{{selector}}}")
    samples = client.query(f'{{__name__=~"{names_regex()}",{selector}}}')
    return readings_from_samples(targets, at_ms, up, samples)
