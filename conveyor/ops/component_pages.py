"""Where each component's metrics page is: a URL Prometheus scrapes, or a file the watcher serves.

A batch job (a lake run) leaves its last figures in a file (node_exporter's textfile format); the
watcher serves it at ``/components/<name>/metrics`` for Prometheus to scrape.
"""

from __future__ import annotations

from pathlib import Path

from conveyor.config import Platform

#: The prefix of a component's page that is a file.
FILE = "file:"


def served_by_watcher(url: str) -> bool:
    """Pages that are no server's: the watcher serves them for Prometheus to scrape."""
    return url.startswith(FILE)


def component_url(platform: Platform, url: str) -> str:
    """``url`` with a relative ``file:`` path made absolute against the platform file's folder."""
    if not url.startswith(FILE):
        return url
    return FILE + str(platform.resolve(Path(url.removeprefix(FILE).removeprefix("//"))))
