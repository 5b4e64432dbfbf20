"""The connections a server of this process holds on a port, read from /proc, for a server that
does not count them itself (gRPC's C core, the dispatcher's): exported as
``conveyor_edge_connections_open`` beside conveyor.edge_guard's, and logged while at their cap.
Needs no web server, so a dispatcher installs without one."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

log = logging.getLogger("conveyor.edge")

#: Seconds between two log lines about refusals (or a port at its cap): a flood brings thousands
#: a second, and a line each would bury the log and cost more than the refusals themselves.
LOG_EVERY = 60.0


def open_family(edge: str, value: int) -> Metric:
    family = GaugeMetricFamily("conveyor_edge_connections_open", "Connections an edge holds, handshakes included",
                               labels=["edge"])
    family.add_metric([edge], value)
    return family



class PortConnections:
    """The connections a server of this process has accepted on ``port`` (``port()``: read at each
    scrape, as a server bound to port 0 knows it only once started), from /proc: for a server, such
    as gRPC's C core, that does not say. Exported as ``conveyor_edge_connections_open``."""

    def __init__(self, edge: str, port: Callable[[], int]) -> None:
        self.edge = edge
        self._port = port

    def count(self) -> int:
        return open_connections(self._port())

    def collect(self) -> Iterator[Metric]:
        yield open_family(self.edge, self.count())


def open_connections(port: int, pid: int | str = "self") -> int:
    """Established TCP connections to local ``port`` whose sockets process ``pid`` holds (the
    accept queue's are held by no one yet); 0 where /proc is not Linux's."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return 0
    inodes = set()
    for fd in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue  # closed since the listing (the listing's own descriptor, for one)
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    local = f":{port:04X}"
    count = 0
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{table}") as lines:
                next(lines, None)
                for line in lines:
                    # sl, local address, remote address, state (01: established), ..., inode
                    fields = line.split(None, 10)
                    if fields[3] == "01" and fields[1].endswith(local) and fields[9] in inodes:
                        count += 1
        except OSError:
            continue
    return count


class PortWatch:
    """Logs, a line a minute at most, while a port holds at least ``cap`` connections: a server
    that refuses past its cap without saying so (gRPC's C core) is then seen refusing."""

    def __init__(self, edge: str, connections: PortConnections, cap: int, setting: str,
                 every: float = 15.0) -> None:
        self._edge, self._connections, self._cap, self._setting, self._every = edge, connections, cap, setting, every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"{edge}-port-watch", daemon=True)
        self._last: float | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self._every + 5)

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            held = self._connections.count()
            now = time.monotonic()
            if held >= self._cap and (self._last is None or now - self._last >= LOG_EVERY):
                self._last = now
                log.warning("%s: %d connections held, its cap (%s): new connections are closed as they are "
                            "accepted until some end", self._edge, held, self._setting)
