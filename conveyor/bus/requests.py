"""What a topic request asks for, and what the platform grants: the topic's declaration, its
partitions from the expected rate, and the partition budget of every cluster it lands on. Pure:
the I/O is conveyor.bus.registrar's.

A topic request is the bus's answer to services editing a platform file: a service names the topic,
its contract, its expected rate and its consumers, and gets the topic on every cluster, with its
ACLs and its routes, or a refusal that says what to change.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pydantic import Field, ValidationError

from conveyor.config import Delivery, Platform, Purpose, Topic
from conveyor.config.requested import REQUESTED_CONTRACTS
from conveyor.config.topics import TopicRequests
from conveyor.config.units import DurationMs, Model, Name, Seconds
from conveyor.errors import Refusal
from conveyor.ops.advise import AdvicePolicy, TopicDemand, steady_consumers

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
    """The declaration the request gets in requested-topics.yaml."""
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
                 contract=f"{REQUESTED_CONTRACTS}/{request.topic}.schema.json",
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
