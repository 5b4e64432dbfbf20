"""The edges' guard against connections that never speak: caps on the connections held, overall and
per client address, checked as each is accepted, and deadlines for its TLS handshake and its first
request. The gateway and the dashboard serve through :class:`GuardedServer`; the dispatcher's gRPC
port has its cap and deadline from gRPC's C core, and its open connections counted by
conveyor.edge_ports (which needs no web server: the dispatcher installs without one).

uvicorn has neither: its ``limit_concurrency`` answers 503 only once a request head is read, which a
connection that never sends one never reaches, and asyncio gives a TLS handshake 60 s. So the guard
accepts the connections itself. One past a cap is closed with a reset at once, before any TLS work
and without a transport; the others go to the event loop (``connect_accepted_socket``) with
uvicorn's protocol. Refusals are counted in ``conveyor_edge_connections_refused_total`` and logged
in one line a minute at most.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import struct
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, Metric
from uvicorn.config import STARTUP_FAILURE
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from conveyor.config.edge import Connections
from conveyor.edge_ports import LOG_EVERY, open_family

log = logging.getLogger("conveyor.edge")

CAP_TOTAL, CAP_PER_CLIENT = "cap_total", "cap_per_client"
HANDSHAKE_DEADLINE, REQUEST_DEADLINE = "handshake_deadline", "request_deadline"
REASONS = (CAP_TOTAL, CAP_PER_CLIENT, HANDSHAKE_DEADLINE, REQUEST_DEADLINE)
#: Connections accepted per wake-up of the listener, so that a flood's accepts leave the event loop
#: to the requests under way between two batches.
_ACCEPTS_PER_WAKE = 256
#: Accept errors that say the process or the kernel ran out of something: accepting pauses for a
#: second, as asyncio's own listener does, instead of spinning on them.
_EXHAUSTED = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
#: SO_LINGER on with 0 s: close() resets the connection and the kernel keeps no state for it.
_RESET = struct.pack("ii", 1, 0)
#: The event loop's own handshake deadline, behind the guard's, in case the guard's timer is late.
_BACKSTOP = 5.0


class ConnectionBook:
    """Connections held, overall and per client address (pure: its rules are tested alone)."""

    def __init__(self, max_total: int, max_per_client: int) -> None:
        self.max_total = max_total
        self.max_per_client = max_per_client
        self.total = 0
        self.per_client: Counter[str] = Counter()

    def admit(self, client: str) -> str | None:
        """Take a place for a new connection from ``client``; the reason it is refused when a cap is met."""
        if self.per_client[client] >= self.max_per_client:
            return CAP_PER_CLIENT
        if self.total >= self.max_total:
            return CAP_TOTAL
        self.per_client[client] += 1
        self.total += 1
        return None

    def release(self, client: str) -> None:
        held = self.per_client.get(client, 0)
        if held <= 0:
            raise ValueError(f"{client} holds no connection to release")
        if held == 1:
            del self.per_client[client]  # an address seen once is not kept for ever
        else:
            self.per_client[client] = held - 1
        self.total -= 1

    def at_cap(self) -> int:
        """Client addresses that hold all they may."""
        return sum(1 for held in self.per_client.values() if held >= self.max_per_client)


class RefusalLog:
    """The refusals not yet logged, and when the next line may be: the first refusal after a quiet
    spell is logged at once, the ones after it together, one line every ``every`` s at most."""

    def __init__(self, every: float = LOG_EVERY) -> None:
        self.every = every
        self.pending: Counter[str] = Counter()
        self._last: float | None = None
        self._first_pending = 0.0

    def record(self, reason: str, now: float) -> str | None:
        """Count one refusal; the line to log now, if one is due."""
        if not self.pending:
            self._first_pending = now
        self.pending[reason] += 1
        return self.flush(now)

    def flush(self, now: float) -> str | None:
        """The line of the refusals not yet logged, once the last line is ``every`` s old."""
        if not self.pending or self.due_in(now) > 0:
            return None
        total = sum(self.pending.values())
        span = now - self._first_pending
        counts = ", ".join(f"{reason} {count:,}" for reason, count in sorted(self.pending.items()))
        self.pending.clear()
        self._last = now
        return f"closed {total:,} connection{'s' if total > 1 else ''}{f' in {span:.0f} s' if span >= 1 else ''}: {counts}"

    def due_in(self, now: float) -> float:
        """Seconds until a line may be logged (0: now)."""
        return 0.0 if self._last is None else max(0.0, self._last + self.every - now)


class EdgeGuard:
    """One edge's places and refusals, their log, and their metrics: a Prometheus collector, to be
    registered on the service's registry. Its places are taken and freed on the edge's event loop."""

    def __init__(self, edge: str, limits: Connections) -> None:
        self.edge = edge
        self.limits = limits
        self.book = ConnectionBook(limits.max_connections, limits.max_per_client)
        #: Every reason from the start, at 0, so that a scrape sees each series before its first refusal.
        self.refusals: dict[str, int] = dict.fromkeys(REASONS, 0)
        self._log = RefusalLog()
        self._flush: asyncio.TimerHandle | None = None

    def admit(self, client: str) -> str | None:
        reason = self.book.admit(client)
        if reason is not None:
            self.refused(reason)
        return reason

    def refused(self, reason: str) -> None:
        self.refusals[reason] += 1
        line = self._log.record(reason, time.monotonic())
        if line is not None:
            self._write(line)
        elif self._flush is None:
            self._flush = asyncio.get_running_loop().call_later(self._log.due_in(time.monotonic()), self._flush_due)

    def _flush_due(self) -> None:
        self._flush = None
        line = self._log.flush(time.monotonic())
        if line is not None:
            self._write(line)

    def _write(self, line: str) -> None:
        book = self.book
        log.warning("%s: %s (%d of %d connections held; %d client address(es) at their cap of %d)", self.edge, line,
                    book.total, book.max_total, book.at_cap(), book.max_per_client)

    def close(self) -> None:
        if self._flush is not None:
            self._flush.cancel()
            self._flush_due()

    def collect(self) -> Iterator[Metric]:
        refused = CounterMetricFamily("conveyor_edge_connections_refused",
                                      "Connections an edge closed unserved: past a cap, or past the deadline of "
                                      "their TLS handshake or of their first request", labels=["edge", "reason"])
        for reason in REASONS:
            refused.add_metric([self.edge, reason], self.refusals[reason])
        yield refused
        yield open_family(self.edge, self.book.total)


class _Place:
    """An admitted connection's place, freed once whichever way the connection ends."""

    __slots__ = ("guard", "client", "accepted", "late", "_held")

    def __init__(self, guard: EdgeGuard, client: str, accepted: float) -> None:
        self.guard, self.client, self.accepted = guard, client, accepted
        self.late = False
        self._held = True

    def free(self) -> None:
        if self._held:
            self._held = False
            self.guard.book.release(self.client)


class GuardedHttp(HttpToolsProtocol):
    """uvicorn's httptools protocol under a guard: a connection whose first request line and
    headers are not all in within ``first_request_timeout`` of its accept is closed, and its place
    is freed when it ends. A protocol with an answer to give then overrides :meth:`request_late`."""

    _place: _Place | None = None
    _first_request: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        place = self._place
        if place is not None:
            self._first_request = self.loop.call_at(place.accepted + place.guard.limits.first_request_timeout,
                                                    self._first_request_due)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._first_request is not None:
            self._first_request.cancel()
            self._first_request = None
        if self._place is not None:
            self._place.free()
        super().connection_lost(exc)

    def _first_request_due(self) -> None:
        self._first_request = None
        # uvicorn makes a request's cycle once its head is in, and keeps the last one.
        if self.cycle is not None or self.transport.is_closing() or self._place is None:
            return
        self._place.guard.refused(REQUEST_DEADLINE)
        self.request_late()

    def request_late(self) -> None:
        # abort, not close: closing a TLS connection waits for the client's close_notify, which a
        # client that sent no request in all this time will not send either.
        self.transport.abort()


class _Listener:
    """The edge's listening sockets (one per address its host names, as asyncio's own server
    binds), accepted from by the guard; what uvicorn closes at shutdown."""

    def __init__(self, guard: EdgeGuard, config: uvicorn.Config, protocol: Callable[[], GuardedHttp],
                 loop: asyncio.AbstractEventLoop) -> None:
        self._guard, self._protocol, self._loop = guard, protocol, loop
        self._tls = config.ssl
        self._handshakes: set[asyncio.Task[None]] = set()
        self._closed = False
        self.sockets: list[socket.socket] = []
        found = socket.getaddrinfo(config.host, config.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        try:
            for family, address in dict.fromkeys((family, address) for family, _, _, _, address in found):
                sock = socket.create_server(address, family=family, backlog=config.backlog)
                self.sockets.append(sock)
                sock.setblocking(False)
        except OSError:
            for sock in self.sockets:
                sock.close()
            raise
        for sock in self.sockets:
            self._loop.add_reader(sock.fileno(), self._accept, sock)

    def _accept(self, sock: socket.socket) -> None:
        for _ in range(_ACCEPTS_PER_WAKE):
            try:
                conn, peer = sock.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as exc:
                if exc.errno not in _EXHAUSTED:
                    raise
                log.error("%s: cannot accept (%s); trying again in 1 s", self._guard.edge, exc.strerror)
                self._loop.remove_reader(sock.fileno())
                self._loop.call_later(1.0, self._resume, sock)
                return
            self._admit(conn, peer[0])

    def _resume(self, sock: socket.socket) -> None:
        if not self._closed:
            self._loop.add_reader(sock.fileno(), self._accept, sock)

    def _admit(self, conn: socket.socket, client: str) -> None:
        if self._guard.admit(client) is not None:
            try:
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
            finally:
                conn.close()
            return
        place = _Place(self._guard, client, self._loop.time())
        task = self._loop.create_task(self._open(conn, place))
        self._handshakes.add(task)
        task.add_done_callback(self._handshakes.discard)

    async def _open(self, conn: socket.socket, place: _Place) -> None:
        """Hand the connection to the event loop; over TLS, within the handshake deadline."""
        deadline = None
        if self._tls is not None:
            task = asyncio.current_task()
            assert task is not None
            deadline = self._loop.call_at(place.accepted + self._guard.limits.handshake_timeout,
                                          self._handshake_late, place, task)
        try:
            await self._loop.connect_accepted_socket(
                lambda: self._made(place), conn, ssl=self._tls,
                ssl_handshake_timeout=None if self._tls is None else self._guard.limits.handshake_timeout + _BACKSTOP)
        except asyncio.CancelledError:
            place.free()
            conn.close()
            if not place.late:
                raise  # the listener is closing
        except Exception:  # noqa: BLE001 (whatever ended the handshake, the client is gone and its place is free)
            place.free()
            conn.close()
        finally:
            if deadline is not None:
                deadline.cancel()

    def _made(self, place: _Place) -> GuardedHttp:
        protocol = self._protocol()
        protocol._place = place  # noqa: SLF001 (the guard's own attribute on its protocol)
        return protocol

    def _handshake_late(self, place: _Place, task: asyncio.Task[None]) -> None:
        place.late = True
        self._guard.refused(HANDSHAKE_DEADLINE)
        task.cancel()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for sock in self.sockets:
            self._loop.remove_reader(sock.fileno())
            sock.close()
        for task in list(self._handshakes):
            task.cancel()
        self._guard.close()

    async def wait_closed(self) -> None:
        if self._handshakes:
            await asyncio.wait(list(self._handshakes), timeout=5)


class GuardedServer(uvicorn.Server):
    """uvicorn's server, listening through ``guard``: the config's protocol must be a GuardedHttp,
    its host and port a TCP address (no sockets, descriptor or Unix socket handed over)."""

    def __init__(self, config: uvicorn.Config, guard: EdgeGuard) -> None:
        super().__init__(config)
        self.guard = guard

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        config = self.config
        if sockets is not None or config.fd is not None or config.uds is not None:
            raise ValueError("a guarded edge listens on its host and port only")
        if not issubclass(_protocol_class(config), GuardedHttp):
            raise TypeError(f"{config.http_protocol_class!r} is not a GuardedHttp: its connections would go unguarded")
        await self.lifespan.startup()
        if self.lifespan.should_exit:
            sys.exit(STARTUP_FAILURE)
        loop = asyncio.get_running_loop()

        def protocol() -> GuardedHttp:
            return config.http_protocol_class(config=config, server_state=self.server_state,  # type: ignore[call-arg]
                                              app_state=self.lifespan.state, _loop=loop)

        try:
            listener = _Listener(self.guard, config, protocol, loop)
        except OSError as exc:
            logging.getLogger("uvicorn.error").error(exc)
            await self.lifespan.shutdown()
            sys.exit(STARTUP_FAILURE)
        self.servers = [listener]  # type: ignore[list-item] (uvicorn only closes them and waits)
        _check_descriptors(self.guard)
        self.started = True


def _protocol_class(config: uvicorn.Config) -> type:
    http = config.http_protocol_class if config.loaded else config.http
    return getattr(http, "func", http)  # a functools.partial of the class, as the gateway's


def _check_descriptors(guard: EdgeGuard) -> None:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and guard.limits.max_connections > soft // 2:
        log.warning("%s: max_connections %d is above half of this process's %d file descriptors (ulimit -n): a "
                    "flood could leave too few for everything else", guard.edge, guard.limits.max_connections, soft)


def guarded_config(app: Any, host: str, port: int, **options: Any) -> uvicorn.Config:
    """uvicorn's settings of a guarded edge with the plain httptools protocol (the dashboard's).
    Every edge is its clients' TLS endpoint, with no proxy before it: uvicorn's proxy_headers would
    let a client on the same host name any address in X-Forwarded-For, and so escape the rate of
    unknown tokens per address."""
    return uvicorn.Config(app, host=host, port=port, http=GuardedHttp, log_level="warning", access_log=False,
                          proxy_headers=False, **options)


class ServedEdge:
    """An edge's app behind its guard as a service (conveyor.service's lifecycle): :meth:`run`
    serves until :meth:`stop`, and the app answers its own /metrics and /healthz on its port."""

    def __init__(self, server: GuardedServer, registry: CollectorRegistry,
                 health: Callable[[], tuple[bool, dict[str, Any]]]) -> None:
        self.server = server
        self.registry = registry
        self._health = health

    def run(self) -> int:
        try:
            self.server.run()
        except SystemExit as exit_:  # a lifespan that failed to start, or a port already taken
            return int(exit_.code or 0)
        return 0

    def stop(self) -> None:
        # uvicorn's own signal handling does the same while it serves; this is for callers that
        # stop it otherwise (conveyor.service.serve's handlers, a test).
        self.server.should_exit = True

    def health(self) -> tuple[bool, dict[str, Any]]:
        return self._health()
