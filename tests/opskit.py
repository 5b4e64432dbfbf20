"""The watcher of one cluster in tests, driven round by round (``ClusterWatch.cycle``), so what each
window holds is decided by the test, not by timing."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from conveyor.config import Platform, parse_platform
from conveyor.config.resolved import resolved
from conveyor.ops.scrape import Scraper
from conveyor.ops.watch import ClusterWatch


def ops_platform_with(platform_data: dict[str, Any], platform_file: Path, **ops: Any) -> Platform:
    """The test platform with these ``ops:`` settings."""
    data = copy.deepcopy(platform_data)
    data["ops"] = ops
    return resolved(parse_platform(data, root=platform_file.parent))


@contextmanager
def cluster_watch(platform: Platform, cluster: str = "central") -> Iterator[ClusterWatch]:
    scraper = Scraper()
    watch = ClusterWatch(platform, cluster, scraper)
    try:
        yield watch
    finally:
        watch.close()
        scraper.close()
