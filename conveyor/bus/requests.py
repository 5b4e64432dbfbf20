"""What a topic request asks for, and what the platform grants: the topic's declaration, its
partitions from the expected rate, the caps on what one service may ask for, and the partition
budget of every cluster it lands on. Pure: the requests are kept in the contract registry
(conveyor.bus.registry) and decided by the provisioner (conveyor.bus.provisioner).

A topic request is the bus's answer to services editing a platform file: a service names the topic,
its contract, its expected rate and its consumers, and gets the topic on every cluster, with its
ACLs and its routes, or a refusal that says what to change.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from pydantic import Field, ValidationError

from conveyor.bus.registry_state import RequestRecord, RequestState, canonical
from conveyor.config import Delivery, Platform, Purpose, Topic
from conveyor.config.topics import TopicRequests
from conveyor.config.units import DurationMs, Model, Name, Seconds
from conveyor.errors import Refusal
from conveyor.topics.contracts import ContractError, compile_contract
from conveyor.topics.advise import AdvicePolicy, TopicDemand, steady_consumers

#: A requested topic's name: Kafka's, without the leading underscore of the platform's own topics.
REQUESTED_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,248}$"


class TopicRequest(Model):
    """The body of ``POST /v1/topics``."""

    topic: str = Field(pattern=REQUESTED_NAME)
    #: The topic's JSON Schema (draft 2020-12), as a contract file holds it.
    contract: dict[str, Any]
    #: Events per second the producers expect to send.
    expected_rate: float = Field(ge=0, le=10_000_000)
    consumers: list[Name] = Field(default_factory=list)
    #: Services that publish besides the one asking.
    producers: list[Name] = Field(default_factory=list)
    retention: DurationMs = Field(default=7 * 86_400_000, ge=60_000)
    delivery: Delivery = Delivery.exact
    #: One consumer's time per event, and the lag it must recover within; the platform's
    #: topic_requests settings when left out.
    processing_time: Seconds | None = Field(default=None, gt=0)
    max_lag: Seconds | None = Field(default=None, gt=0)


class InvalidRequest(Refusal):
    status, reason = 422, "invalid_request"


class TopicTaken(Refusal):
    status, reason = 409, "topic_exists"


class OverBudget(Refusal):
    status, reason = 422, "partition_budget"


class OverCap(Refusal):
    """The service holds as many topics or partitions as topic_requests lets one service hold."""

    status, reason = 422, "request_cap"


class TooManyRequests(Refusal):
    """The service asked for topic_requests.max_requests_per_hour topics within the last hour."""

    status, reason = 429, "request_rate"


class RefusedBefore(Refusal):
    """A refusal the provisioner recorded, answered again as it was."""

    def __init__(self, body: dict[str, Any]) -> None:
        details = {k: v for k, v in body.items() if k not in ("error", "message", "status")}
        super().__init__(str(body.get("message", "refused")), **details)
        self.status, self.reason = int(body.get("status", 422)), str(body.get("error", "refused"))


def read_request(body: bytes | dict[str, Any]) -> TopicRequest:
    """A request from its JSON body (the gateway's) or its fields (the command line's); each problem
    named with its field."""
    try:
        return TopicRequest.model_validate(body) if isinstance(body, dict) else TopicRequest.model_validate_json(body)
    except ValidationError as err:
        problems = [f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in err.errors()]
        raise InvalidRequest("; ".join(problems), problems=problems) from None


def partitions_for(request: TopicRequest, settings: TopicRequests) -> tuple[int, str]:
    """The topic's partitions: the default, or more when its rate asks for more consumers (the
    advisor's steady-state count); refused above the most a request may take."""
    demand = TopicDemand(request.topic, settings.default_partitions, request.expected_rate,
                         request.processing_time or settings.processing_time, request.max_lag or settings.max_lag)
    needed, because = steady_consumers(demand, AdvicePolicy())
    partitions = max(settings.default_partitions, math.ceil(needed - 1e-9))
    if partitions > settings.max_partitions:
        raise InvalidRequest(f"{needed:.1f} consumers needed ({because}): {partitions} partitions is above the "
                             f"{settings.max_partitions} a requested topic may have; use the dispatcher on fewer "
                             "partitions, or have the platform team declare the topic",
                             partitions=partitions, max_partitions=settings.max_partitions)
    reason = f"{needed:.1f} consumers needed ({because})" if partitions > settings.default_partitions \
        else f"the default {settings.default_partitions}"
    return partitions, reason


def requested_topic(request: TopicRequest, requester: str, platform: Platform) -> Topic:
    """The declaration the request gets; its contract is kept in the registry, not in a file."""
    unknown = sorted({*request.consumers, *request.producers} - set(platform.services))
    if unknown:
        raise InvalidRequest(f"unknown service(s) {', '.join(unknown)} (known: {', '.join(sorted(platform.services))})",
                             services=unknown)
    loose = sorted(name for name, route in platform.routes.items()
                   if route.requested and platform.cluster(route.destination).purpose is Purpose.logs)
    if request.delivery is Delivery.exact and loose:
        raise InvalidRequest(f"route(s) {', '.join(loose)} copy requested topics into a logs cluster (acks=1, no "
                             "transactions): ask for delivery at_least_once, or have the platform team declare the "
                             "topic", routes=loose)
    partitions, _ = partitions_for(request, platform.topic_requests)
    return Topic(partitions=partitions, retention=request.retention, delivery=request.delivery,
                 producers=sorted({requester, *request.producers}), consumers=sorted(set(request.consumers)),
                 expected_rate=request.expected_rate, requested_by=requester)


def check_budgets(platform: Platform, clusters: Mapping[str, int], adding: int) -> None:
    """Refuse when ``adding`` partitions would take any cluster (name -> partitions it holds now)
    past its partition budget."""
    over = {name: held for name, held in clusters.items() if held + adding > platform.cluster(name).partition_budget}
    if over:
        name, held = sorted(over.items())[0]
        budget = platform.cluster(name).partition_budget
        raise OverBudget(f"cluster {name} holds {held:,} partitions; {adding} more would pass its partition budget of "
                         f"{budget:,}: delete unused topics there, or raise clusters.{name}.partition_budget",
                         cluster=name, partitions=held, adding=adding, budget=budget)


def refusal_body(refusal: Refusal) -> dict[str, Any]:
    """A refusal as a request record keeps it: the gateway's body and its status."""
    return {**refusal.body(), "status": refusal.status}


def new_record(request: TopicRequest, requester: str, platform: Platform, now: datetime) -> RequestRecord:
    """The record a request gets in the registry: its declaration and its contract, checked to be
    one the platform can enforce."""
    try:
        compile_contract(request.topic, request.contract)
    except ContractError as err:
        raise InvalidRequest(str(err), field="contract") from None
    spec = requested_topic(request, requester, platform)
    declaration = spec.model_dump(mode="json", exclude_defaults=True)
    return RequestRecord(request.topic, declaration, canonical(request.contract), requester,
                         now.isoformat(timespec="seconds"))


def declared(record: RequestRecord) -> Topic:
    """The topic a granted request declares."""
    return Topic.model_validate(record.declaration)


def granted_topics(requests: Mapping[str, RequestRecord]) -> dict[str, Topic]:
    """The requested topics the platform carries: those the provisioner granted."""
    return {name: declared(r) for name, r in sorted(requests.items()) if r.state == RequestState.granted}


def check_asked(platform: Platform, requests: Mapping[str, RequestRecord], asked: RequestRecord,
                now: datetime) -> RequestRecord | None:
    """Whether ``asked`` may be recorded: the request already held when it is the same one (asking
    again changes nothing), None when it is new; refused when the name is taken or the asking
    service is past a cap of topic_requests."""
    if asked.topic in platform.topics and platform.topics[asked.topic].requested_by is None:
        raise TopicTaken(f"topic {asked.topic} is declared in platform.yaml; pick another name", topic=asked.topic)
    held = requests.get(asked.topic)
    if held is not None and held.state != RequestState.refused:
        if (held.declaration, held.contract, held.requested_by) == (asked.declaration, asked.contract,
                                                                     asked.requested_by):
            return held
        raise TopicTaken(f"topic {asked.topic} exists (requested by {held.requested_by}) with another declaration or "
                         "contract; pick another name", topic=asked.topic)
    check_caps(platform.topic_requests, requests.values(), asked, now)
    return None


def check_caps(settings: TopicRequests, requests: Iterable[RequestRecord], asked: RequestRecord, now: datetime) -> None:
    """Refuse ``asked`` when its service would hold more topics or partitions than a service may,
    or has asked for as many topics as it may within the hour before ``now``."""
    mine = [r for r in requests if r.requested_by == asked.requested_by and r.topic != asked.topic]
    held = [r for r in mine if r.state != RequestState.refused]
    service = asked.requested_by
    if len(held) + 1 > settings.max_topics_per_service:
        raise OverCap(f"service {service} holds {len(held)} requested topics, the most topic_requests."
                      f"max_topics_per_service lets one service hold ({settings.max_topics_per_service}): delete one, "
                      "or have the platform team raise the cap", cap="max_topics_per_service",
                      limit=settings.max_topics_per_service, held=len(held))
    partitions = sum(r.partitions for r in held)
    if partitions + asked.partitions > settings.max_partitions_per_service:
        raise OverCap(f"service {service} holds {partitions} partitions of requested topics; {asked.partitions} more "
                      f"would pass topic_requests.max_partitions_per_service ({settings.max_partitions_per_service})",
                      cap="max_partitions_per_service", limit=settings.max_partitions_per_service, held=partitions,
                      adding=asked.partitions)
    since = now - timedelta(hours=1)
    recent = [r for r in mine if datetime.fromisoformat(r.requested_at) > since]
    if len(recent) + 1 > settings.max_requests_per_hour:
        raise TooManyRequests(f"service {service} asked for {len(recent)} topics within the last hour, the most "
                              f"topic_requests.max_requests_per_hour allows ({settings.max_requests_per_hour}); ask "
                              "again later", cap="max_requests_per_hour", limit=settings.max_requests_per_hour,
                              retry_after=3600)


def decided(record: RequestRecord, now: datetime, refusal: Refusal | None = None) -> RequestRecord:
    """The record once the provisioner has granted it, or refused it with ``refusal``."""
    return replace(record, state=RequestState.refused if refusal else RequestState.granted,
                   decided_at=now.isoformat(timespec="seconds"),
                   refusal=refusal_body(refusal) if refusal else None)


@dataclass(frozen=True)
class Granted:
    topic: str
    partitions: int
    #: Clusters that carry the topic.
    clusters: tuple[str, ...]
    #: Routes that copy it.
    routes: tuple[str, ...]
    requested_by: str
    #: False when the same request had been granted before (asked again, it changes nothing).
    new: bool

    def body(self) -> dict[str, object]:
        return {"topic": self.topic, "partitions": self.partitions, "clusters": list(self.clusters),
                "routes": list(self.routes), "requested_by": self.requested_by, "new": self.new}


def granted(platform: Platform, record: RequestRecord, new: bool) -> Granted:
    """What a granted request gave: its clusters and the routes that copy it."""
    requested = {name: topic for name, topic in platform.topics.items() if topic.requested_by is not None}
    carrying = platform.with_requested({**requested, record.topic: declared(record)})
    routes = tuple(sorted(n for n in carrying.routes if record.topic in carrying.route_topics(n)))
    return Granted(record.topic, record.partitions, tuple(carrying.clusters_of(record.topic)), routes,
                   record.requested_by, new)
