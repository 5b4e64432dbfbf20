"""The watcher of one cluster in tests, driven round by round (``ClusterWatch.cycle``), so what each
window holds is decided by the test, not by timing."""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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


class WebhookReceiver:
    """A webhook receiver (a real HTTP server on 127.0.0.1) that keeps the bodies posted to it and
    answers 500 to its first ``failures`` posts."""

    def __init__(self, failures: int = 0) -> None:
        self.failures = failures
        self.bodies: list[dict] = []
        self.attempts = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                receiver.attempts += 1
                if receiver.attempts <= receiver.failures:
                    self.send_response(500)
                else:
                    receiver.bodies.append(body)
                    self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: object) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def close(self) -> None:
        self.server.shutdown()
