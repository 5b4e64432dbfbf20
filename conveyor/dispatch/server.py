"""A dispatcher node: the Discovery and Reader gRPC services, and /metrics and /healthz over HTTP.

A (topic, group) is served from the first time a client locates or subscribes to it on this node:
the node starts a ``GroupReader`` for it, whose consumer joins the Kafka group and gets a share of
the partitions. Each Read stream takes a worker thread of the gRPC server for its frames out and a
thread of its own for the frames in (acks, nacks, credit). A stream's token is checked before
anything is read from it, and it must subscribe within ``dispatch.subscribe_timeout``: a stream
waiting for its first frame holds one of the node's ``MAX_STREAMS`` slots. A pair without a client
for ``dispatch.reader_idle_timeout`` has its reader stopped; the next client gets a new one, which
starts from the group's commit. A new pair is refused (RESOURCE_EXHAUSTED) while the node runs
``dispatch.max_readers`` readers, or the group's service ``dispatch.max_readers_per_service``; a
new stream while its service holds ``dispatch.max_streams_per_service``.

The gRPC port's connections are bounded by gRPC's C core with ``dispatch.connections``
(:func:`grpc_options`): a cap over all clients, a handshake deadline, idle and keepalive bounds. It
has no cap per client address and does not say what it refuses, so the node counts the connections
it holds from /proc (``conveyor_edge_connections_open{edge="dispatch"}``) and logs while they are at
the cap (conveyor.edge_ports.PortWatch).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from typing import Any, NoReturn

import grpc
from grpc_health.v1 import health as grpc_health
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from confluent_kafka import KafkaException

from conveyor import kafka
from conveyor.auth import Forbidden, TooManyAttempts, Unauthenticated
from conveyor.config import Part, Platform
from conveyor.config.edge import GrpcConnections
from conveyor.dispatch.access import Access, owner
from conveyor.dispatch.discovery import Membership
from conveyor.dispatch.errors import (
    AccessError,
    ForeignGroup,
    GroupInUse,
    NodeStopping,
    ReaderLimit,
    ReaderStopped,
)
from conveyor.dispatch.fanout import Client
from conveyor.dispatch.metrics import NodeMetrics
from conveyor_sdk.protos import dispatch_pb2 as pb
from conveyor_sdk.protos import dispatch_pb2_grpc as pb_grpc
from conveyor.dispatch.reader import GroupReader
from conveyor.dispatch.share_reader import ShareReader
from conveyor.dispatch.source import Source
from conveyor.dispatch.streams import FirstFrameTimeout, Inbound
from conveyor.edge_ports import PortConnections, PortWatch
from conveyor.gctune import tune_for_throughput
from conveyor.service import Endpoint, MetricsServer
from conveyor.tls import server_tls

log = logging.getLogger(__name__)

#: Read streams one node holds open; more get RESOURCE_EXHAUSTED.
MAX_STREAMS = 512
#: Longest pause between two looks for idle readers.
_REAP_EVERY = 5.0
_STATUS = {
    Unauthenticated: grpc.StatusCode.UNAUTHENTICATED,
    TooManyAttempts: grpc.StatusCode.RESOURCE_EXHAUSTED,
    Forbidden: grpc.StatusCode.PERMISSION_DENIED,
    ForeignGroup: grpc.StatusCode.PERMISSION_DENIED,
}


def dispatch_cluster(platform: Platform) -> str:
    """The cluster dispatchers read: dispatch.cluster, else the platform's read cluster."""
    return platform.read_cluster(platform.dispatch.cluster, "dispatch.cluster")


class DispatchNode:
    def __init__(self, platform: Platform, host: str = "127.0.0.1", port: int | None = None,
                 metrics_port: int | None = None, advertise: str | None = None,
                 metrics_host: str | None = None) -> None:
        platform = platform.acting_as(Part.dispatcher)
        self.platform = platform
        self.cluster = dispatch_cluster(platform)
        self.host = host
        self.port = platform.dispatch.port if port is None else port
        self.metrics_port = platform.dispatch.metrics_port if metrics_port is None else metrics_port
        self.metrics_host = metrics_host or host
        self._advertise = advertise
        self.metrics = NodeMetrics()
        self.registry = self.metrics.registry
        self.access = Access(platform, self.cluster)
        self.membership = Membership(kafka.admin(platform, self.cluster))
        self._readers: dict[tuple[str, str], Source] = {}
        #: Read streams open per service: each holds a gRPC worker thread and one of its own.
        self._streams: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._grpc: grpc.Server | None = None
        self._http: MetricsServer | None = None
        self._stop_requested = threading.Event()
        self._grpc_health = grpc_health.HealthServicer()
        self._stopping = False
        self._reaper_stop = threading.Event()
        self._reaper: threading.Thread | None = None
        self._connections = PortConnections("dispatch", lambda: self.port)
        self.registry.register(self._connections)
        self._port_watch = PortWatch("dispatch", self._connections, platform.dispatch.connections.max_connections,
                                     "dispatch.connections.max_connections")

    @property
    def advertise(self) -> str:
        """host:port clients reach this node at; with port 0, known once ``start`` has bound one."""
        return self._advertise or f"{self.host}:{self.port}"

    def start(self) -> None:
        """Listen (port 0 for either port: one the OS picks, read back here) and serve."""
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=MAX_STREAMS + 16, thread_name_prefix="grpc"),
                             maximum_concurrent_rpcs=MAX_STREAMS, options=grpc_options(self.platform.dispatch.connections))
        pb_grpc.add_DiscoveryServicer_to_server(DiscoveryService(self), server)
        pb_grpc.add_ReaderServicer_to_server(ReaderService(self), server)
        # The standard health service and reflection: Kubernetes' gRPC probes and grpcurl work as
        # with any gRPC server.
        health_pb2_grpc.add_HealthServicer_to_server(self._grpc_health, server)
        served = [pb.DESCRIPTOR.services_by_name[name].full_name for name in ("Discovery", "Reader")]
        reflection.enable_server_reflection([*served, grpc_health.SERVICE_NAME, reflection.SERVICE_NAME], server)
        for name in ("", *served):
            self._grpc_health.set(name, health_pb2.HealthCheckResponse.SERVING)
        served_tls = server_tls(self.platform, self.platform.dispatch.tls)
        address = f"{self.host}:{self.port}"
        bound = (server.add_insecure_port(address) if served_tls is None else server.add_secure_port(
            address, grpc.ssl_server_credentials([(served_tls.key.read_bytes(), served_tls.cert.read_bytes())])))
        if bound == 0:
            raise OSError(f"cannot listen on {self.host}:{self.port}")
        self.port = bound
        self._http = MetricsServer(self.registry, self.health, Endpoint(self.metrics_host, self.metrics_port))
        self.metrics_port = self._http.port
        server.start()
        self._grpc = server
        self._reaper = threading.Thread(target=self._reap_idle, name="dispatch-reaper", daemon=True)
        self._reaper.start()
        self._port_watch.start()
        tune_for_throughput()
        log.info("dispatcher %s serving cluster %s (metrics on %s:%d)", self.advertise, self.cluster, self.host,
                 self.metrics_port)

    def run(self) -> int:
        """Serve until :meth:`stop` (conveyor.service runs a node this way)."""
        self.start()
        self._stop_requested.wait()
        self.close()
        return 0

    def stop(self) -> None:
        self._stop_requested.set()

    def close(self, grace: float = 10.0) -> None:
        """Commit every partition's acks, leave the groups, end the streams, stop listening."""
        with self._lock:
            self._stopping = True
        self._grpc_health.enter_graceful_shutdown()  # probes see NOT_SERVING while the acks are committed
        self._reaper_stop.set()
        if self._reaper is not None:
            self._reaper.join()  # it may be stopping a reader it has taken out of the table
        with self._lock:
            readers = list(self._readers.values())
        for reader in readers:
            reader.stop()
        if self._grpc is not None:
            self._grpc.stop(grace).wait()
        self._port_watch.stop()
        if self._http is not None:
            self._http.close()
        self.membership.close()

    def wait(self) -> None:
        assert self._grpc is not None
        self._grpc.wait_for_termination()

    def reader(self, topic: str, group: str) -> Source:
        """The running reader of (topic, group), started on first use (and again if it died), of
        the backend ``dispatch.backend`` names: clients cannot tell which."""
        with self._lock:
            if self._stopping:
                raise NodeStopping("the node is stopping; locate another")
            reader = self._readers.get((topic, group))
            if reader is None or not reader.alive or reader.stopping:
                if reader is not None:
                    reader.stop()
                else:
                    self._admit(group)
                backend = ShareReader if self.platform.dispatch.backend == "share" else GroupReader
                reader = backend(self.platform, self.cluster, topic, group, self.advertise,
                                 self.metrics.reader(topic, group))
                reader.start()
                self._readers[(topic, group)] = reader
                self.metrics.readers.set(len(self._readers))
                log.info("serving %s as %s group %s", topic, self.platform.dispatch.backend, group)
            else:
                reader.touch(time.monotonic())
            return reader

    def _admit(self, group: str) -> None:
        """Under the lock: raise ReaderLimit if a reader for a new ``group`` would pass a cap."""
        settings = self.platform.dispatch
        service = owner(group)
        mine = sum(1 for _, g in self._readers if owner(g) == service)
        if mine >= settings.max_readers_per_service:
            problem = (f"service {service} already has {mine} readers on this node, its limit "
                       "(dispatch.max_readers_per_service)")
            setting = "dispatch.max_readers_per_service"
        elif len(self._readers) >= settings.max_readers:
            problem = f"this node already runs {len(self._readers)} readers, its limit (dispatch.max_readers)"
            setting = "dispatch.max_readers"
        else:
            return
        self.metrics.refused.labels(service=service, limit=setting).inc()
        log.warning("refused a reader for group %s: %s", group, problem)
        raise ReaderLimit(f"{problem}; a group without a client (no stream, no Locate) loses its reader after "
                          f"dispatch.reader_idle_timeout ({settings.reader_idle_timeout:g} s): close the streams "
                          "of groups no longer read, use fewer group names, or raise the limit", setting)

    def _reap_idle(self) -> None:
        """Stop the readers that have had no client for ``reader_idle_timeout``: their consumers
        and threads go, and their partitions go to the nodes whose clients read them."""
        idle_for = self.platform.dispatch.reader_idle_timeout
        while not self._reaper_stop.wait(min(idle_for / 2, _REAP_EVERY)):
            now = time.monotonic()
            with self._lock:
                if self._stopping:
                    return
                idle = {pair: r for pair, r in self._readers.items() if r.retire_if_idle(now, idle_for)}
                for topic, group in idle:
                    del self._readers[(topic, group)]
                    self.metrics.forget(topic, group)  # before a new reader of the pair binds its series
                    # Counted with the slot it frees, not after the slow stop, so that a group admitted
                    # into that slot never sees the count lag behind.
                    self.metrics.reaped.labels(topic=topic, group=group).inc()
                self.metrics.readers.set(len(self._readers))
            for (topic, group), reader in idle.items():
                reader.stop()
                log.info("stopped the reader of %s/%s: no client for %g s", topic, group, idle_for)

    def health(self) -> tuple[bool, dict[str, Any]]:
        with self._lock:
            readers = dict(self._readers)
        body = {f"{t}/{g}": {"alive": r.alive, "partitions": r.partitions(),
                             **({"error": repr(r.failure)} if r.failure is not None else {})}
                for (t, g), r in readers.items()}
        ok = all(r.alive for r in readers.values()) and not self._stopping
        return ok, {"node": self.advertise, "readers": body}

    def authenticate(self, context: grpc.ServicerContext) -> str:
        """The service whose token the call carries, before the stream is read at all."""
        try:
            return self.access.service(dict(context.invocation_metadata()).get("authorization"), _address(context))
        except (Unauthenticated, TooManyAttempts) as exc:
            _abort(context, _STATUS[type(exc)], str(exc))

    def authorize(self, context: grpc.ServicerContext, topic: str, group: str) -> str:
        authorization = dict(context.invocation_metadata()).get("authorization")
        try:
            return self.access.check(authorization, topic, group, _address(context))
        except (Unauthenticated, TooManyAttempts, Forbidden, AccessError) as exc:
            _abort(context, _STATUS.get(type(exc), grpc.StatusCode.NOT_FOUND), str(exc))

    def serving(self, context: grpc.ServicerContext, topic: str, group: str) -> Source:
        try:
            return self.reader(topic, group)
        except NodeStopping as exc:
            _abort(context, grpc.StatusCode.UNAVAILABLE, str(exc))
        except GroupInUse as exc:
            _abort(context, grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        except ReaderLimit as exc:
            _abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))

    @contextmanager
    def stream_slot(self, context: grpc.ServicerContext, service: str) -> Iterator[None]:
        """One of ``service``'s ``dispatch.max_streams_per_service`` Read streams, so that one
        service's clients cannot take every stream the node holds (MAX_STREAMS) from the others."""
        limit = self.platform.dispatch.max_streams_per_service
        with self._lock:
            held = self._streams[service]
            if held < limit:
                self._streams[service] += 1
        if held >= limit:
            self.metrics.streams_refused.labels(service).inc()
            _abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED,
                   f"service {service} already has {held} Read streams open on this node, its limit "
                   "(dispatch.max_streams_per_service): close streams no longer read, or raise the limit")
        try:
            yield
        finally:
            with self._lock:
                self._streams[service] -= 1

    def attach(self, context: grpc.ServicerContext, topic: str, group: str, client: Client) -> Source:
        """Connect ``client`` to the pair's reader, and to a fresh one if that stopped meanwhile."""
        for _ in range(3):
            reader = self.serving(context, topic, group)
            try:
                reader.connect(client)
                return reader
            except ReaderStopped:
                continue
        _abort(context, grpc.StatusCode.UNAVAILABLE, f"the reader of {topic}/{group} keeps stopping; try again")


class DiscoveryService(pb_grpc.DiscoveryServicer):
    def __init__(self, node: DispatchNode) -> None:
        self._node = node

    def Locate(self, request: pb.LocateRequest, context: grpc.ServicerContext) -> pb.LocateResponse:  # noqa: N802
        node = self._node
        node.authorize(context, request.topic, request.group)
        reader = node.serving(context, request.topic, request.group)
        try:
            members = node.membership.nodes(request.topic, reader.membership)
        except NodeStopping as exc:
            _abort(context, grpc.StatusCode.UNAVAILABLE, str(exc))
        except KafkaException as exc:
            _abort(context, grpc.StatusCode.UNAVAILABLE, f"cannot read the group's membership: {exc}")
        nodes = {n.address: n.partitions for n in members}
        # This node serves the pair from now on, though the group may not have settled yet.
        nodes[node.advertise] = tuple(sorted({*nodes.get(node.advertise, ()), *reader.partitions()}))
        return pb.LocateResponse(nodes=[pb.Node(address=a, partitions=p) for a, p in sorted(nodes.items())])


class ReaderService(pb_grpc.ReaderServicer):
    def __init__(self, node: DispatchNode) -> None:
        self._node = node

    def Read(self, requests: Iterator[pb.ReadRequest],  # noqa: N802
             context: grpc.ServicerContext) -> Iterator[pb.ReadResponse]:
        node = self._node
        settings = node.platform.dispatch
        service = node.authenticate(context)
        with node.stream_slot(context, service):
            inbound = Inbound(requests, round(settings.max_retry_delay * 1000), "read-in")
            try:
                reader, client = self._subscribe(context, inbound, service)
            except BaseException:
                inbound.abandon()
                raise
            inbound.serve(reader, client)
            try:
                while (frame := client.outbox.get()) is not None:
                    yield frame
            finally:
                client.open = False
                reader.disconnect(client)
            if inbound.problem is not None:
                _abort(context, grpc.StatusCode.INVALID_ARGUMENT, inbound.problem)

    def _subscribe(self, context: grpc.ServicerContext, inbound: Inbound, service: str) -> tuple[Source, Client]:
        """The stream's first frame, within the time allowed, and the reader it subscribes to."""
        node = self._node
        timeout = node.platform.dispatch.subscribe_timeout
        try:
            first = inbound.first(timeout)
        except FirstFrameTimeout:
            node.metrics.subscribe_timeouts.inc()
            _abort(context, grpc.StatusCode.DEADLINE_EXCEEDED,
                   f"no Subscribe within {timeout:g} s of opening the stream (dispatch.subscribe_timeout)")
        if first is None or not first.HasField("subscribe"):
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT, "the first frame of a Read stream must be a Subscribe")
        subscribe = first.subscribe
        node.authorize(context, subscribe.topic, subscribe.group)
        client = Client(service, subscribe.credit)
        return node.attach(context, subscribe.topic, subscribe.group, client), client


def grpc_options(connections: GrpcConnections) -> list[tuple[str, int]]:
    """gRPC's C core settings for ``dispatch.connections`` (docs/dispatch.md)."""
    def ms(seconds: float) -> int:
        return max(1, round(seconds * 1000))

    options = [("grpc.max_allowed_incoming_connections", connections.max_connections),
               ("grpc.server_handshake_timeout_ms", ms(connections.handshake_timeout)),
               ("grpc.max_connection_idle_ms", ms(connections.idle_timeout)),
               ("grpc.max_concurrent_streams", connections.max_streams_per_connection),
               ("grpc.keepalive_time_ms", ms(connections.keepalive_interval)),
               ("grpc.keepalive_timeout_ms", ms(connections.keepalive_timeout)),
               # The server's pings go on while a Read stream has no messages to send, which is
               # when a vanished client would otherwise hold its stream for good.
               ("grpc.http2.max_pings_without_data", 0)]
    if connections.max_age is not None:
        options.append(("grpc.max_connection_age_ms", ms(connections.max_age)))
    return options


def _address(context: grpc.ServicerContext) -> str:
    """The caller's address without its port (``ipv4:127.0.0.1:51234`` -> ``ipv4:127.0.0.1``)."""
    return context.peer().rpartition(":")[0]


def _abort(context: grpc.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
    context.abort(code, message)
    raise AssertionError("context.abort returns only by raising")
