"""One replicator service for many routes: a process serves a worker of each route it is given (every
route of platform.yaml when it is given none), and takes a route added to the file while it runs.

Kafka is the controller. Each route's workers form one consumer group over the route topic's
partitions, one per bucket, with the cooperative-sticky assignor: the group coordinator assigns the
buckets, a worker's loss moves only its buckets, and a route added, or a process joining, takes
buckets without revoking any that keep their owner. There is no controller process to run, lose or
fail over; the coordinator's own failover is Kafka's. Routes never share a group, so one route's
moves never pause another's copying.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from pathlib import Path
from typing import Any

from conveyor.config import ConfigError, Platform, load_resolved_platform
from conveyor.replicate.metrics import ReplicateMetrics
from conveyor.replicate.worker import Worker

log = logging.getLogger(__name__)

#: Seconds between looks at platform.yaml for routes added, and at the routes' workers.
RELOAD_INTERVAL = 2.0
#: Seconds before a route whose worker ended on an error is started again.
RESTART_AFTER = 5.0


class RoutesService:
    """The workers of many routes in one process, with one /metrics and one /healthz."""

    def __init__(self, platform: Platform, routes: list[str] | None = None, worker_id: str | None = None,
                 platform_file: Path | None = None) -> None:
        """``routes``: the routes to serve, or None for every route, those added to ``platform_file``
        while it runs included."""
        self.platform = platform
        self.chosen = routes
        self.worker_id = worker_id or f"{socket.gethostname()}-{os.getpid()}"
        self.platform_file = platform_file
        self._file_seen = self._file_stamp()
        self.metrics = ReplicateMetrics()
        self.registry = self.metrics.registry
        self.workers: dict[str, Worker] = {}
        self._platforms: dict[str, Platform] = {}
        self._threads: dict[str, threading.Thread] = {}
        self._statuses: dict[str, int] = {}
        self._told_gone: set[str] = set()
        self._stop = threading.Event()

    def stop(self) -> None:
        self._stop.set()
        for worker in list(self.workers.values()):
            worker.stop()

    def health(self) -> tuple[bool, dict[str, Any]]:
        routes = {name: worker.health()[1] for name, worker in self.workers.items()}
        ended = sorted(name for name, thread in self._threads.items() if not thread.is_alive())
        healthy = all(worker.health()[0] for worker in self.workers.values()) and not ended
        return healthy, {"worker": self.worker_id, "routes": routes, **({"ended": ended} if ended else {})}

    def _worker_id(self, route: str) -> str:
        # One route served: the id as given (a route's workers are told apart by it).
        return self.worker_id if self.chosen is not None and len(self.chosen) == 1 else f"{route}-{self.worker_id}"

    def _start(self, platform: Platform, route: str) -> None:
        worker = Worker(platform, route, self._worker_id(route), self.metrics)
        self.workers[route], self._platforms[route] = worker, platform
        thread = threading.Thread(target=self._run, args=(route, worker), name=f"route-{route}", daemon=True)
        self._threads[route] = thread
        thread.start()
        log.info("serving route %s", route)

    def _run(self, route: str, worker: Worker) -> None:
        self._statuses[route] = worker.run()

    def _restart_ended(self) -> None:
        """A route whose worker ended on its own (a bucket failed) starts again, alone: its buckets
        go to the other workers meanwhile, and the other routes never stop."""
        for route, thread in list(self._threads.items()):
            if not thread.is_alive() and not self._stop.is_set():
                log.error("route %s stopped (status %d); starting it again in %.0f s", route,
                          self._statuses.get(route, 1), RESTART_AFTER)
                if self._stop.wait(RESTART_AFTER):
                    return
                self._start(self._platforms[route], route)

    def _file_stamp(self) -> tuple[int, int] | None:
        try:
            stat = self.platform_file.stat() if self.platform_file is not None else None
        except OSError:
            return None
        return (stat.st_mtime_ns, stat.st_size) if stat is not None else None

    def _take_new_routes(self) -> None:
        """Every route of platform.yaml, when no route was named: one added starts at once, and
        nothing running moves (a new route is a new group)."""
        if self.platform_file is None or self.chosen is not None:
            return
        stamp = self._file_stamp()
        if stamp == self._file_seen:
            return
        try:
            platform = load_resolved_platform(self.platform_file)
        except ConfigError as err:  # a bad edit must not stop the routes running
            log.warning("%s not reloaded; serving the routes it had: %s", self.platform_file, err)
            return
        self._file_seen = stamp
        for route in platform.routes:
            if route not in self.workers:
                self._start(platform, route)
        for route in sorted(set(self.workers) - set(platform.routes) - self._told_gone):
            log.warning("route %s left %s; its worker stops at the next restart", route, self.platform_file)
            self._told_gone.add(route)

    def run(self) -> int:
        for route in self.chosen if self.chosen is not None else list(self.platform.routes):
            self._start(self.platform, route)
        while not self._stop.wait(RELOAD_INTERVAL):
            self._restart_ended()
            self._take_new_routes()
        for thread in self._threads.values():
            thread.join(120)
        return max(self._statuses.values(), default=0)
