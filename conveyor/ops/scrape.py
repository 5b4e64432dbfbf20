"""Scraping Prometheus pages: each broker's JMX exporter (the watcher's health rules, the balancer, the
throttle).

Where the pages are: each cluster's ``metrics`` in platform.yaml (`conveyor up` gives those of
the clusters it starts).
Parsing is prometheus_client's own text parser; names from Strimzi's exporter rules become ours
there (``conveyor.ops.exporter_names``); what the values mean is ``conveyor.ops.health``.
"""

from __future__ import annotations

import ssl

import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx
from prometheus_client.parser import text_string_to_metric_families

from conveyor.config import Platform
from conveyor.ops.exporter_names import canonical_labels, canonical_name
from conveyor.ops.health import BrokerReading, MetricSample, reading_from_samples


@dataclass(frozen=True, slots=True)
class Family:
    """One metric family of a page: its name (counters without ``_total``), type and samples."""

    name: str
    type: str
    samples: tuple[MetricSample, ...]


@dataclass(frozen=True, slots=True)
class Target:
    node: str
    url: str
    broker_id: int | None = None
    #: False for a dedicated controller; None when unknown (inferred from its metrics).
    broker: bool | None = None


def metrics_targets(platform: Platform, cluster: str) -> tuple[Target, ...]:
    """Every node of ``cluster`` whose exporter can be scraped."""
    return tuple(Target(page.node or urlsplit(page.url).netloc, page.url, page.broker,
                        True if page.broker is not None else False if page.controller else None)
                 for page in platform.cluster(cluster).metrics)


def _sample(name: str, labels: Mapping[str, str], value: float) -> MetricSample:
    ours = canonical_name(name)
    return ours, canonical_labels(ours, labels), value


def parse_page(text: str) -> tuple[Family, ...]:
    """The page's families, with the names every reader knows whichever exporter rules printed it."""
    return tuple(Family(canonical_name(f.name), f.type,
                        tuple(_sample(s.name, s.labels, s.value) for s in f.samples))
                 for f in text_string_to_metric_families(text))


def fetch(client: httpx.Client, url: str) -> tuple[Family, ...]:
    """The page at ``url``, parsed. Raises httpx.HTTPError or ValueError (not a Prometheus page)."""
    response = client.get(url)
    response.raise_for_status()
    return parse_page(response.text)


#: A component's page may be a file: a batch job's last figures (node_exporter's textfile format),
#: which the watcher serves for Prometheus to scrape.
FILE = "file:"


def served_by_watcher(url: str) -> bool:
    """Pages that are no server's: the watcher serves them for Prometheus to scrape."""
    return url.startswith(FILE)


def component_url(platform: Platform, url: str) -> str:
    """``url`` with a relative ``file:`` path made absolute against the platform file's folder."""
    if not url.startswith(FILE):
        return url
    return FILE + str(platform.resolve(Path(url.removeprefix(FILE).removeprefix("//"))))


def _read(client: httpx.Client, target: Target) -> BrokerReading:
    at_ms = time.time_ns() // 1_000_000
    try:
        families = fetch(client, target.url)
    except (httpx.HTTPError, ValueError) as exc:
        return BrokerReading(target.node, at_ms, target.broker_id, f"{type(exc).__name__}: {exc}", target.broker)
    samples = (sample for family in families for sample in family.samples)
    return reading_from_samples(target.node, at_ms, samples, target.broker_id, target.broker)


class Scraper:
    """Scrapes many pages at once over one HTTP client; a dead node costs at most ``timeout``."""

    def __init__(self, timeout: float = 3.0, workers: int = 8, verify: ssl.SSLContext | bool = True) -> None:
        """``verify``: what an https page must be signed by (conveyor.tls.trusted: the system's
        authorities and the local CA)."""
        self.client = httpx.Client(timeout=timeout, verify=verify)
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ops-scrape")

    def readings(self, targets: Sequence[Target]) -> list[BrokerReading]:
        return list(self.pool.map(lambda t: _read(self.client, t), targets))

    def pages(self, urls: Sequence[str]) -> list[tuple[Family, ...] | str]:
        """Each page parsed, or the reason it could not be read."""
        def one(url: str) -> tuple[Family, ...] | str:
            try:
                return fetch(self.client, url)
            except (httpx.HTTPError, ValueError) as exc:
                return f"{type(exc).__name__}: {exc}"
        return list(self.pool.map(one, urls))

    def close(self) -> None:
        self.pool.shutdown(wait=False)
        self.client.close()
