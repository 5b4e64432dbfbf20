"""Scraping Prometheus pages: each broker's JMX exporter, for the balancer and the throttle.

Where the pages are: each cluster's ``metrics`` in platform.yaml (conveyor.ops.broker_readings's
``metrics_targets``). Parsing is prometheus_client's own text parser; names from Strimzi's exporter
rules become ours there (``conveyor.ops.exporter_names``).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from conveyor.config import Platform
from conveyor.ops.exporter_names import canonical_labels, canonical_name
from conveyor.ops.health import MetricSample


@dataclass(frozen=True, slots=True)
class Family:
    """One metric family of a page: its name (counters without ``_total``), type and samples."""

    name: str
    type: str
    samples: tuple[MetricSample, ...]


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


class Scraper:
    """Scrapes many pages at once over one HTTP client; a dead node costs at most ``timeout``."""

    def __init__(self, timeout: float = 3.0, workers: int = 8, verify: ssl.SSLContext | bool = True) -> None:
        """``verify``: what an https page must be signed by (conveyor.tls.trusted: the system's
        authorities and the local CA)."""
        self.client = httpx.Client(timeout=timeout, verify=verify)
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ops-scrape")

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
