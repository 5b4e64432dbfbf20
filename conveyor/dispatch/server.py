"""A dispatcher node: the Discovery and Reader gRPC services, and /metrics and /healthz over HTTP.

A (topic, group) is served from the first time a client locates or subscribes to it on this node:
the node starts a ``GroupReader`` for it, whose consumer joins the Kafka group and gets a share of
the partitions. Each Read stream takes a worker thread of the gRPC server for its frames out and a
thread of its own for the frames in (acks, nacks, credit).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from concurrent import futures
from typing import Any, NoReturn

import grpc
from confluent_kafka import KafkaException

from conveyor import kafka
from conveyor.auth import Forbidden, Unauthenticated
from conveyor.config import ClusterRole, ConfigError, Platform, Problem
from conveyor.dispatch.access import Access
from conveyor.dispatch.discovery import Membership
from conveyor.dispatch.errors import AccessError, ForeignGroup, GroupInUse, NodeStopping
from conveyor.dispatch.fanout import Client
from conveyor.dispatch.health import serve_http
from conveyor.dispatch.metrics import NodeMetrics
from conveyor.dispatch.protos import dispatch_pb2 as pb
from conveyor.dispatch.protos import dispatch_pb2_grpc as pb_grpc
from conveyor.dispatch.reader import GroupReader
from conveyor.dispatch.share_reader import ShareReader
from conveyor.dispatch.source import Source
from conveyor.gctune import tune_for_throughput

log = logging.getLogger(__name__)

#: Read streams one node holds open; more get RESOURCE_EXHAUSTED.
MAX_STREAMS = 512
_STATUS = {
    Unauthenticated: grpc.StatusCode.UNAUTHENTICATED,
    Forbidden: grpc.StatusCode.PERMISSION_DENIED,
    ForeignGroup: grpc.StatusCode.PERMISSION_DENIED,
}


def dispatch_cluster(platform: Platform) -> str:
    """The cluster dispatchers read: dispatch.cluster, else pipeline.source, else the only read cluster."""
    if platform.dispatch.cluster is not None:
        platform.cluster(platform.dispatch.cluster)
        return platform.dispatch.cluster
    if platform.pipeline.source is not None:
        return platform.pipeline.source
    read = [name for name, c in platform.clusters.items() if c.role == ClusterRole.read]
    if len(read) != 1:
        raise ConfigError([Problem("dispatch.cluster", f"set it: there are {len(read)} read clusters")])
    return read[0]


class DispatchNode:
    def __init__(self, platform: Platform, host: str = "127.0.0.1", port: int | None = None,
                 metrics_port: int | None = None, advertise: str | None = None) -> None:
        self.platform = platform
        self.cluster = dispatch_cluster(platform)
        self.host = host
        self.port = platform.dispatch.port if port is None else port
        self.metrics_port = platform.dispatch.metrics_port if metrics_port is None else metrics_port
        self._advertise = advertise
        self.metrics = NodeMetrics()
        self.access = Access(platform, self.cluster)
        self.membership = Membership(kafka.admin(platform, self.cluster))
        self._readers: dict[tuple[str, str], Source] = {}
        self._lock = threading.Lock()
        self._grpc: grpc.Server | None = None
        self._http: Any = None
        self._stopping = False

    @property
    def advertise(self) -> str:
        """host:port clients reach this node at; with port 0, known once ``start`` has bound one."""
        return self._advertise or f"{self.host}:{self.port}"

    def start(self) -> None:
        """Listen (port 0 for either port: one the OS picks, read back here) and serve."""
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=MAX_STREAMS + 16, thread_name_prefix="grpc"),
                             maximum_concurrent_rpcs=MAX_STREAMS)
        pb_grpc.add_DiscoveryServicer_to_server(DiscoveryService(self), server)
        pb_grpc.add_ReaderServicer_to_server(ReaderService(self), server)
        bound = server.add_insecure_port(f"{self.host}:{self.port}")
        if bound == 0:
            raise OSError(f"cannot listen on {self.host}:{self.port}")
        self.port = bound
        self._http = serve_http(self.host, self.metrics_port, self.metrics.registry, self.health)
        self.metrics_port = self._http.server_address[1]
        server.start()
        self._grpc = server
        tune_for_throughput()
        log.info("dispatcher %s serving cluster %s (metrics on %s:%d)", self.advertise, self.cluster, self.host,
                 self.metrics_port)

    def stop(self, grace: float = 10.0) -> None:
        """Commit every partition's acks, leave the groups, end the streams, stop listening."""
        with self._lock:
            self._stopping = True
            readers = list(self._readers.values())
        for reader in readers:
            reader.stop()
        if self._grpc is not None:
            self._grpc.stop(grace).wait()
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
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
            if reader is None or not reader.alive:
                if reader is not None:
                    reader.stop()
                backend = ShareReader if self.platform.dispatch.backend == "share" else GroupReader
                reader = backend(self.platform, self.cluster, topic, group, self.advertise,
                                 self.metrics.reader(topic, group))
                reader.start()
                self._readers[(topic, group)] = reader
                log.info("serving %s as %s group %s", topic, self.platform.dispatch.backend, group)
            return reader

    def health(self) -> tuple[bool, dict[str, Any]]:
        with self._lock:
            readers = dict(self._readers)
        body = {f"{t}/{g}": {"alive": r.alive, "partitions": r.partitions(),
                             **({"error": repr(r.failure)} if r.failure is not None else {})}
                for (t, g), r in readers.items()}
        ok = all(r.alive for r in readers.values()) and not self._stopping
        return ok, {"status": "ok" if ok else "failing", "node": self.advertise, "readers": body}

    def authorize(self, context: grpc.ServicerContext, topic: str, group: str) -> str:
        authorization = dict(context.invocation_metadata()).get("authorization")
        try:
            return self.access.check(authorization, topic, group)
        except (Unauthenticated, Forbidden, AccessError) as exc:
            _abort(context, _STATUS.get(type(exc), grpc.StatusCode.NOT_FOUND), str(exc))

    def serving(self, context: grpc.ServicerContext, topic: str, group: str) -> Source:
        try:
            return self.reader(topic, group)
        except NodeStopping as exc:
            _abort(context, grpc.StatusCode.UNAVAILABLE, str(exc))
        except GroupInUse as exc:
            _abort(context, grpc.StatusCode.FAILED_PRECONDITION, str(exc))


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
        first = next(requests, None)
        if first is None or not first.HasField("subscribe"):
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT, "the first frame of a Read stream must be a Subscribe")
        subscribe = first.subscribe
        service = self._node.authorize(context, subscribe.topic, subscribe.group)
        reader = self._node.serving(context, subscribe.topic, subscribe.group)
        client = Client(service, subscribe.credit)
        problem: list[str] = []
        reader.connect(client)
        threading.Thread(target=_pump, args=(requests, reader, client, problem), daemon=True,
                         name=f"read-in-{client.id}").start()
        try:
            while (frame := client.outbox.get()) is not None:
                yield frame
        finally:
            client.open = False
            reader.disconnect(client)
        if problem:
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT, problem[0])


def _pump(requests: Iterator[pb.ReadRequest], reader: Source, client: Client, problem: list[str]) -> None:
    """The client's frames in; the stream ends when they end, or with the first bad one."""
    try:
        for request in requests:
            why = _invalid(request)
            if why is not None:
                problem.append(why)
                return
            reader.handle(client, request)
    except grpc.RpcError:
        pass  # the client went away: what it held goes to the others
    finally:
        reader.disconnect(client)
        client.outbox.put(None)


def _invalid(request: pb.ReadRequest) -> str | None:
    if request.HasField("subscribe"):
        return "a stream subscribes once, in its first frame"
    for ids in (request.acks, *(n.ids for n in request.nacks)):
        if len(ids.partitions) != len(ids.offsets):
            return f"ids have {len(ids.partitions)} partitions but {len(ids.offsets)} offsets"
    return None


def _abort(context: grpc.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
    context.abort(code, message)
    raise AssertionError("context.abort returns only by raising")
