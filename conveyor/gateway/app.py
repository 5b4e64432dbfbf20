"""The gateway's HTTP API: ``POST /v1/topics/{topic}/events`` (plain ASGI,
conveyor.gateway.events_route), and through FastAPI the topic requests, the contract registry,
``/healthz``, ``/readyz`` and ``/metrics``.

A request is all-or-nothing up to Kafka: it is authenticated and authorised before its body is
read; the body is read up to the size limit and within a deadline, holding no place, so a slow
sender holds up no other request; then the request is admitted (a bound on requests checked or
written at once), parsed and checked against the topic's contract and every size limit on the way
to Kafka in full before a single event is written, and the answer comes only after Kafka
acknowledged every event (acks=all). Health and metrics never pass through the admission bound or
the per-topic lanes, so they answer while a topic is stuck.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from datetime import datetime, timezone
from concurrent.futures import ThreadPoolExecutor
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

from conveyor.auth import SCRYPT_SLOTS, Authorizer, TooManyAttempts
from conveyor.config import Part, Platform, read_contract
from conveyor.errors import Refusal
from conveyor.gateway.bodies import request_body
from conveyor.gateway.events_route import EventsFirst
from conveyor.gateway.bulkhead import Bulkheads
from conveyor.gateway.errors import Overloaded, UnknownTopic, refusal_headers
from conveyor.gateway.limits import read_topic_maxima
from conveyor.limits import batch_size, event_limit
from conveyor.gateway.metrics import GatewayMetrics
from conveyor.gateway.openapi import topic_paths
from conveyor.gateway.parsing import media_type, prepare
from conveyor.gateway.registry_api import add_registry_routes
from conveyor.gateway.writer import Accepted, Writer
from conveyor.gctune import tune_for_throughput
from conveyor.topics.contracts import Contract, compile_contract, load_contracts
from conveyor.bus.registry import Registry, RegistryMissing, RegistryUnavailable
from conveyor.bus.registry_state import RequestRecord, RequestState, Version, subject_of, verdict
from conveyor.bus.requests import RefusedBefore, granted, granted_topics, new_record, read_request

log = logging.getLogger(__name__)

#: Seconds a health probe's answer about the clusters is reused.
HEALTH_REUSE = 2.0

#: Bodies larger than this are parsed and checked on a worker thread, so one large request does not
#: hold every other request on the event loop up for its whole parse.
PARSE_OFF_LOOP_BYTES = 256 * 1024
#: Largest topic request body: a contract and a few names.
REQUEST_BODY_LIMIT = 256 * 1024
#: Requests whose token is being verified against scrypt hashes at once: twice the hashing slots
#: (conveyor.auth), so a slot freed is taken at once; more are refused with 429 unhashed.
VERIFIERS = 2 * SCRYPT_SLOTS


def instance_id(dc: str) -> str:
    """Unique per gateway process and start: names it in its log and its health answer."""
    return f"{dc}-{socket.gethostname()}-{os.getpid()}-{int(time.time())}-{uuid.uuid4().hex[:6]}"


class Gateway:
    """Everything one gateway process holds; no I/O until :meth:`start`."""

    def __init__(self, platform: Platform, dc: str, source: str | None = None) -> None:
        platform = platform.acting_as(Part.gateway)
        cluster = platform.cluster(dc)
        self.platform = platform
        self.dc = dc
        self.settings = platform.gateway
        self.source = source or instance_id(dc)
        self.auth = Authorizer(platform)
        self.contracts = load_contracts(platform)
        #: The contract registry, where the platform keeps one: a topic's latest version there is its
        #: contract, enforced from the moment the registry's record reaches this gateway.
        self.registry = Registry(platform, f"conveyor-gateway-{dc}") if platform.contracts.topic in platform.topics \
            else None
        #: topic -> (the registry's version, its compiled contract): compiled once per version.
        self._versions: dict[str, tuple[Version, Contract]] = {}
        self._learning = asyncio.Lock()
        self.metrics = GatewayMetrics(dc)
        self.writer = Writer(platform, dc, list(cluster.failover), self.settings.failover_after,
                             f"conveyor-gateway-{dc}", on_switch=self._switched, logs_wait=self.settings.logs_wait)
        self.bulkheads: Bulkheads | None = None
        #: Per topic, the most bytes one event's key and value may take; set by :meth:`start`.
        self.event_limits: dict[str, int] = {}
        self._in_progress = 0
        #: Between the end of :meth:`start` and the start of :meth:`stop`.
        self.serving = False
        #: The latest answer of :meth:`writable` and when it came (monotonic seconds).
        self._writable: tuple[float, str | None] = (float("-inf"), None)
        self._probing = asyncio.Lock()
        #: scrypt verifications run on threads of their own, never on the loop's default executor,
        #: which the health probe and large bodies' parsing use.
        self._verifier = ThreadPoolExecutor(VERIFIERS, thread_name_prefix="gateway-token")
        self._verifying = 0

    def _switched(self, old: str, new: str, why: str) -> None:
        self.metrics.failovers.labels(old, new).inc()
        self._show_active(new)

    def _show_active(self, active: str) -> None:
        for cluster in self.writer.order:
            self.metrics.active_cluster.labels(cluster).set(1 if cluster == active else 0)
        self.metrics.failed_over.set(0 if active == self.dc else 1)

    async def start(self) -> None:
        s = self.settings
        if self.registry is not None:
            try:
                await asyncio.to_thread(self.registry.start)
            except RegistryMissing as err:  # it keeps following: versions count from the topic's creation
                log.warning("%s; until then events are checked against the contract files", err)
            else:
                await asyncio.to_thread(self._register_declared)
                await self.learn_requested()
        self.bulkheads = Bulkheads(s.lanes, s.workers_per_lane, s.queue_per_lane)
        maxima = await asyncio.to_thread(read_topic_maxima, self.platform, self.writer.order, self.contracts)
        self.event_limits = {topic: event_limit(s.max_event_bytes, m) for topic, m in maxima.items()}
        self.writer.start(batch_size(maxima.values()))
        self._show_active(self.dc)
        tune_for_throughput()
        log.info("gateway %s writing to %s (failover: %s)", self.source, self.dc,
                 ", ".join(self.writer.order[1:]) or "none")
        self.serving = True

    def _register_declared(self) -> None:
        """A declared topic the registry has no version of yet gets its contract file as version 1:
        from then on every version, through any gateway, is held to the rule against it."""
        for topic, contract in self.contracts.items():
            if self.registry is not None and self.registry.latest(topic) is None:
                self.registry.register(subject_of(topic), read_contract(self.platform, topic), "platform.yaml")

    def contract_of(self, topic: str) -> tuple[Contract, list[tuple[str, bytes]] | None]:
        """What a topic's events are checked against: its latest version in the registry, else its
        contract file; and the record header naming that version (none without a registry)."""
        latest = self.registry.latest(topic) if self.registry is not None else None
        if latest is None:
            return self.contracts[topic], None
        held = self._versions.get(topic)
        if held is None or held[0] is not latest:
            held = (latest, compile_contract(topic, latest.parsed))
            self._versions[topic] = held
        return held[1], [verdict(latest)]

    def schema_of(self, topic: str) -> dict[str, Any]:
        latest = self.registry.latest(topic) if self.registry is not None else None
        return latest.parsed if latest is not None else read_contract(self.platform, topic)

    async def stop(self) -> None:
        self.serving = False
        if self.registry is not None:
            self.registry.stop()
        self._verifier.shutdown(wait=False, cancel_futures=True)
        left = await self.writer.stop()
        if left:
            log.error("%d messages were still undelivered at shutdown", left)

    async def writable(self) -> str | None:
        """A cluster of the gateway's that answers, or None; probes within ``HEALTH_REUSE`` seconds of
        the last share its answer, so frequent health checks do not each ask every cluster."""
        async with self._probing:
            at, cluster = self._writable
            if time.monotonic() - at >= HEALTH_REUSE:
                cluster = await asyncio.to_thread(self.writer.writable)
                self._writable = (time.monotonic(), cluster)
            return cluster

    def saturated(self) -> bool:
        return self._in_progress >= self.settings.max_concurrent_requests

    @contextmanager
    def admission(self) -> Iterator[None]:
        """A request being checked or written; refused at once when ``max_concurrent_requests`` are."""
        limit = self.settings.max_concurrent_requests
        if self.saturated():
            raise Overloaded(f"the gateway has {limit} requests in progress; retry later", retry_after=1)
        self._in_progress += 1
        try:
            yield
        finally:
            self._in_progress -= 1

    async def service_of(self, authorization: str | None, address: str) -> str:
        """Who is asking. A token that needs a scrypt hash is verified off the event loop
        (conveyor.auth bounds it)."""
        if self.auth.decided(authorization):
            return self.auth.service_of(authorization, address)
        if self._verifying >= VERIFIERS:
            raise TooManyAttempts(f"{VERIFIERS} token verifications are in progress; retry later", retry_after=1)
        self._verifying += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(
                self._verifier, self.auth.service_of, authorization, address)
        finally:
            self._verifying -= 1

    async def authorize(self, topic: str, authorization: str | None, address: str) -> None:
        """Before the body is read: who is asking, for a topic that takes events, as its producer."""
        service = await self.service_of(authorization, address)
        if topic not in self.platform.topics:
            await self.learn_requested()  # granted through another gateway since
        if topic not in self.platform.topics or topic not in self.contracts:
            raise UnknownTopic(f"no topic {topic} takes events through the gateway", topic=topic)
        self.auth.check_producer(service, topic)

    def _registry(self) -> Registry:
        if self.registry is None:
            topic = self.platform.contracts.topic
            raise RegistryUnavailable(f"the platform keeps no contract registry (its topic {topic} is not declared), "
                                      "so topics cannot be requested through the bus")
        return self.registry

    async def request_topic(self, service: str, body: bytes) -> tuple[int, dict[str, Any]]:
        """A topic request of an authorized service, recorded in the registry for the registrar
        (conveyor.registrar): 201 once granted (200 when the same request was granted before),
        the registrar's refusal, or 202 when it has not decided within topic_requests.grant_wait."""
        registry = self._registry()
        asked = new_record(read_request(body), service, self.platform, datetime.now(timezone.utc))
        held, new = await asyncio.to_thread(registry.submit, asked)
        record: RequestRecord | None = held
        if held.state == RequestState.pending:
            record = await asyncio.to_thread(registry.wait_decided, held.topic,
                                             self.platform.topic_requests.grant_wait)
        if record is None:
            return 202, self.request_state(held.topic)
        if record.refusal is not None:
            raise RefusedBefore(record.refusal)
        await self.learn_requested()
        return 201 if new else 200, granted(self.platform, record, new).body()

    def request_state(self, topic: str) -> dict[str, Any]:
        """Where the request for ``topic`` stands (GET /v1/topics/requests/{topic})."""
        with self._registry().reading() as state:
            record = state.requests.get(topic)
        if record is None:
            raise UnknownTopic(f"no topic {topic} was requested", topic=topic)
        answer: dict[str, Any] = {"topic": topic, "state": record.state, "requested_by": record.requested_by,
                                  "requested_at": record.requested_at, "poll": f"/v1/topics/requests/{topic}"}
        if record.state == RequestState.granted:
            answer.update(granted(self.platform, record, False).body())
        if record.refusal is not None:
            answer["refusal"] = record.refusal
        return answer

    async def learn_requested(self) -> None:
        """Serve the topics granted since the last look, with their latest contract versions: the
        registry holds both, so a gateway started anywhere serves every one."""
        if self.registry is None:
            return
        async with self._learning:
            with self.registry.reading() as state:
                topics = granted_topics(state.requests)
                versions = {name: state.newest.get(name) for name in topics if name not in self.contracts}
            new = {name: compile_contract(name, v.parsed) for name, v in versions.items() if v is not None}
            if not new:
                return
            platform = self.platform.with_requested(topics)
            maxima = await asyncio.to_thread(read_topic_maxima, platform, self.writer.order, new)
            self.event_limits.update({t: event_limit(self.settings.max_event_bytes, m) for t, m in maxima.items()})
            self.contracts.update(new)
            self.platform = platform
            self.auth.learn_topics(platform)
            log.info("serving requested topic(s) %s", ", ".join(sorted(new)))

    async def publish(self, topic: str, body: bytes, content_type: str) -> dict[str, Any]:
        """Events of an authorized request, all written or none acknowledged."""
        contract, headers = self.contract_of(topic)
        check = (body, content_type, contract, self.event_limits[topic], self.settings.max_events_per_request)
        prepared = await asyncio.to_thread(prepare, *check) if len(body) > PARSE_OFF_LOOP_BYTES else prepare(*check)
        assert self.bulkheads is not None
        async with self.bulkheads.enter(topic):
            accepted = await self.writer.write(topic, prepared.records,
                                               itemized=len(prepared.records) <= self.settings.summary_above,
                                               headers=headers)
        if accepted.shed:
            self.metrics.shed.labels(topic, self.writer.local).inc(len(accepted.shed))
        for cluster, count in accepted.by_cluster().items():
            self.metrics.accepted.labels(topic, cluster).inc(count)
        return _answer(accepted)


def _answer(accepted: Accepted) -> dict[str, Any]:
    counts: dict[str, Any] = {"accepted": accepted.size - len(accepted.shed)}
    if accepted.shed:
        counts["shed"] = len(accepted.shed)
    if accepted.deliveries is not None:
        return {**counts, "events": [{"cluster": d.cluster, "partition": d.partition, "offset": d.offset}
                                     for d in accepted.deliveries if d is not None]}
    return {**counts, "partitions": [{"cluster": c, "partition": p, "first_offset": lo, "last_offset": hi, "count": n}
                                     for (c, p), (lo, hi, n) in sorted(accepted.spans.items())]}


def create_app(gateway: Gateway) -> EventsFirst:
    """The gateway's ASGI app: the events path (conveyor.gateway.events_route), then FastAPI's routes."""
    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await gateway.start()
        try:
            yield
        finally:
            await gateway.stop()

    app = FastAPI(title="Conveyor gateway", lifespan=lifespan, openapi_url="/openapi.json")
    add_registry_routes(app, gateway)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, err: StarletteHTTPException) -> Response:
        # FastAPI's own refusals (no such path, wrong method) in the gateway's error shape.
        reason = {404: "not_found", 405: "method_not_allowed"}.get(err.status_code, "bad_request")
        return Response(orjson.dumps({"error": reason, "message": str(err.detail)}), err.status_code,
                        getattr(err, "headers", None), media_type="application/json")

    @app.post("/v1/topics")
    async def request_topic(request: Request) -> Response:
        """Ask for a topic: its contract, expected rate and consumers; 201 with the clusters and
        routes that carry it, 200 when the same request was granted before."""
        try:
            service = await gateway.service_of(request.headers.get("authorization"),
                                               request.client.host if request.client else "")
            gateway.auth.check_requester(service)
            media_type(request.headers.get("content-type"))
            body = await request_body(request, REQUEST_BODY_LIMIT, gateway.settings.body_timeout)
            status, answer = await gateway.request_topic(service, body)
        except Refusal as err:
            gateway.metrics.topic_requests.labels(err.reason).inc()
            return Response(orjson.dumps(err.body()), err.status, refusal_headers(err), media_type="application/json")
        gateway.metrics.topic_requests.labels("granted" if status < 202 else "pending").inc()
        app.openapi_schema = None  # the new topic's path
        headers = {"Location": answer["poll"]} if status == 202 else None
        return Response(orjson.dumps(answer), status, headers, media_type="application/json")

    @app.get("/v1/topics/requests/{topic}")
    async def topic_request(topic: str, request: Request) -> Response:
        """Where a topic request stands: pending, granted (with its clusters and routes) or refused
        (with the refusal); any service that may request topics may ask."""
        try:
            service = await gateway.service_of(request.headers.get("authorization"),
                                               request.client.host if request.client else "")
            gateway.auth.check_requester(service)
            answer = gateway.request_state(topic)
        except Refusal as err:
            return Response(orjson.dumps(err.body()), err.status, refusal_headers(err), media_type="application/json")
        return Response(orjson.dumps(answer), 200, media_type="application/json")

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(title=app.title, version=app.version, routes=app.routes)
            contracts = {topic: gateway.schema_of(topic) for topic in gateway.contracts}
            app.openapi_schema = topic_paths(document, contracts)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

    async def health() -> dict[str, Any]:
        writable = await gateway.writable()
        return {"status": "ok" if writable else "unwritable", "source": gateway.source,
                "writing_to": gateway.writer.active, "local": gateway.dc,
                "failed_over": gateway.writer.active != gateway.dc, "writable": writable}

    @app.get("/healthz")
    async def healthz() -> Response:
        """503 when no cluster of the gateway's (its own, then its failover) answers: every event
        sent to it would be refused."""
        body = await health()
        return Response(orjson.dumps(body), 200 if body["writable"] else 503, media_type="application/json")

    @app.get("/readyz")
    async def readyz() -> Response:
        """Whether to send this gateway traffic now: healthy, serving (not starting or stopping) and
        with an admission place free."""
        body = await health()
        if body["writable"] and not gateway.serving:
            body["status"] = "stopping"
        elif body["writable"] and gateway.saturated():
            body["status"] = "saturated"
        ready = body["status"] == "ok"
        return Response(orjson.dumps({**body, "ready": ready}), 200 if ready else 503, media_type="application/json")

    @app.get("/metrics")
    async def metrics() -> Response:
        if gateway.bulkheads is not None:
            for lane, occupied in gateway.bulkheads.occupancy().items():
                gateway.metrics.lane_occupied.labels(str(lane)).set(occupied)
        return Response(generate_latest(gateway.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return EventsFirst(app, gateway)

