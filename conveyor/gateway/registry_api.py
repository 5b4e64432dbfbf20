"""The contract registry over HTTP, served by every gateway with its TLS and tokens: Confluent
Schema Registry's REST API for the JSON Schema type (so its clients and serializers work as they
are), and the bus's own ``POST /v1/topics/{topic}/contract``.

Subjects are ``<topic>-value``. Reading takes any service token; registering a version, or a
subject's rule, takes being among the topic's producers. A token comes as ``Bearer <token>`` or as
HTTP Basic's password (``basic.auth.user.info``). Errors carry Confluent's ``error_code`` beside
the gateway's own ``error`` and ``message``.
"""

from __future__ import annotations

import asyncio
import functools
from typing import TYPE_CHECKING, Any

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response

from conveyor.bus.registry import (IncompatibleContract, InvalidContract, Registry, RegistryUnavailable,
                                   UnknownSubject, refusal)
from conveyor.bus.registry_state import Version, canonical, subject_of, topic_of
from conveyor.config import Compatibility
from conveyor.errors import Refusal
from conveyor.gateway.bodies import request_body
from conveyor.gateway.errors import MalformedBody

if TYPE_CHECKING:
    from conveyor.gateway.app import Gateway

MEDIA = "application/vnd.schemaregistry.v1+json"
#: Largest body of a registration: a contract and its wrapping.
BODY_LIMIT = 256 * 1024


class NoRegistry(Refusal):
    status, reason = 404, "no_registry"


class UnknownVersion(Refusal):
    status, reason = 404, "version_not_found"


class UnknownSchema(Refusal):
    status, reason = 404, "schema_not_found"


#: Confluent's error codes, which its clients read.
_ERROR_CODES = {UnknownSubject: 40401, UnknownVersion: 40402, UnknownSchema: 40403, IncompatibleContract: 409,
                InvalidContract: 42201, RegistryUnavailable: 50003}


def _answer(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status, media_type=MEDIA)


def _refused(err: Refusal) -> Response:
    code = _ERROR_CODES.get(type(err), err.status * 100 + 1 if err.status < 500 else 50001)
    return _answer({**err.body(), "error_code": code}, err.status)


def _described(version: Version) -> dict[str, Any]:
    return {"subject": version.subject, "version": version.version, "id": version.id, "schema": version.schema,
            "schemaType": "JSON"}


def _schema_of(body: bytes) -> Any:
    """The schema of a Schema Registry request body (``{"schema": "<JSON text>", "schemaType": "JSON"}``)."""
    try:
        request = orjson.loads(body)
        if not isinstance(request, dict) or not isinstance(request.get("schema"), str):
            raise ValueError("the body must be a JSON object with the schema as a string in \"schema\"")
        if request.get("schemaType", "JSON") != "JSON":
            raise ValueError(f"schemaType {request['schemaType']!r}: this registry keeps JSON Schema contracts only")
        return orjson.loads(request["schema"])
    except (orjson.JSONDecodeError, ValueError) as err:
        raise MalformedBody(f"not a schema registration: {err}") from None


def add_registry_routes(app: FastAPI, gateway: Gateway) -> None:
    def registry() -> Registry:
        if gateway.registry is None:
            raise NoRegistry(f"this platform keeps no contract registry (declare topic {gateway.platform.contracts.topic})")
        return gateway.registry

    async def caller(request: Request) -> str:
        return await gateway.service_of(request.headers.get("authorization"),
                                        request.client.host if request.client else "")

    async def producer_of(request: Request, subject: str) -> str:
        service = await caller(request)
        topic = topic_of(subject)
        if topic is None or topic not in gateway.platform.topics:
            raise UnknownSubject(f"subject {subject} names no topic of the platform (subjects are <topic>-value)",
                                 subject=subject)
        gateway.auth.check_producer(service, topic)
        return service

    async def raw(request: Request) -> bytes:
        return await request_body(request, BODY_LIMIT, gateway.settings.body_timeout)

    async def body_of(request: Request) -> Any:
        return _schema_of(await raw(request))

    def version_of(subject: str, version: str) -> Version:
        with registry().reading() as state:
            versions = state.versions(subject)
            if not versions:
                raise UnknownSubject(f"subject {subject} has no version", subject=subject)
            if version in ("latest", "-1"):
                return versions[-1]
            found = next((v for v in versions if str(v.version) == version), None)
        if found is None:
            raise UnknownVersion(f"subject {subject} has no version {version}", subject=subject, version=version)
        return found

    def answering(handler: Any) -> Any:
        @functools.wraps(handler)  # FastAPI reads the handler's own parameters through it
        async def run(request: Request, **path: str) -> Response:
            try:
                return await handler(request, **path)
            except Refusal as err:
                return _refused(err)
        return run

    @answering
    async def subjects(request: Request) -> Response:
        await caller(request)
        with registry().reading() as state:
            return _answer(sorted(s for s, versions in state.subjects.items() if versions))

    @answering
    async def versions(request: Request, subject: str) -> Response:
        await caller(request)
        with registry().reading() as state:
            found = [v.version for v in state.versions(subject)]
        if not found:
            raise UnknownSubject(f"subject {subject} has no version", subject=subject)
        return _answer(found)

    @answering
    async def version(request: Request, subject: str, number: str) -> Response:
        await caller(request)
        return _answer(_described(version_of(subject, number)))

    @answering
    async def version_schema(request: Request, subject: str, number: str) -> Response:
        await caller(request)
        return Response(version_of(subject, number).schema, media_type=MEDIA)

    @answering
    async def by_id(request: Request, schema_id: str) -> Response:
        await caller(request)
        with registry().reading() as state:
            found = state.by_id.get(int(schema_id)) if schema_id.isdigit() else None
        if found is None:
            raise UnknownSchema(f"no schema has id {schema_id}", id=schema_id)
        return _answer({"schema": found.schema, "schemaType": "JSON"})

    @answering
    async def register(request: Request, subject: str) -> Response:
        service = await producer_of(request, subject)
        schema = await body_of(request)
        registered = await asyncio.to_thread(registry().register, subject, schema, service)
        return _answer({"id": registered.version.id, "version": registered.version.version,
                        "subject": subject, "schemaType": "JSON"})

    @answering
    async def lookup(request: Request, subject: str) -> Response:
        await caller(request)
        schema = await body_of(request)
        with registry().reading() as state:
            found = state.find(subject, canonical(schema))
        if found is None:
            raise UnknownSchema(f"subject {subject} has no such version", subject=subject)
        return _answer(_described(found))

    @answering
    async def compatibility(request: Request, subject: str, number: str | None = None) -> Response:
        await caller(request)
        schema = await body_of(request)
        against = None if number is None else version_of(subject, number).version
        rule, found = registry().incompatibilities(subject, schema, against)
        body: dict[str, Any] = {"is_compatible": not found}
        if request.query_params.get("verbose") == "true":
            body["messages"] = [i.message for i in found]
        return _answer(body)

    @answering
    async def get_config(request: Request, subject: str | None = None) -> Response:
        await caller(request)
        with registry().reading() as state:
            rule = state.rule(subject, gateway.platform)
        return _answer({"compatibilityLevel": rule.value})

    @answering
    async def set_config(request: Request, subject: str | None = None) -> Response:
        if subject is None:
            raise NoRegistry("the registry's own rule is platform.yaml's (contracts.compatibility): change it there")
        await producer_of(request, subject)
        try:
            rule = Compatibility(orjson.loads(await raw(request))["compatibility"])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            raise MalformedBody("the body must be {\"compatibility\": <one of "
                                f"{', '.join(r.value for r in Compatibility)}>}}") from None
        await asyncio.to_thread(registry().set_rule, subject, rule)
        return _answer({"compatibility": rule.value})

    @answering
    async def topic_contract(request: Request, topic: str) -> Response:
        """The bus's own registration: the topic's next contract version, its body the schema."""
        subject = subject_of(topic)
        service = await producer_of(request, subject)
        try:
            schema = orjson.loads(await raw(request))
        except orjson.JSONDecodeError as err:
            raise MalformedBody(f"the body is not JSON: {err}") from None
        if request.query_params.get("dry_run") == "true":
            rule, found = registry().incompatibilities(subject, schema)
            if found:
                raise refusal(subject, rule, found)
            return _answer({"topic": topic, "compatible": True, "rule": rule.value})
        registered = await asyncio.to_thread(registry().register, subject, schema, service)
        return _answer({"topic": topic, "subject": subject, "version": registered.version.version,
                        "id": registered.version.id, "created": registered.created},
                       201 if registered.created else 200)

    routes = [
        ("GET", "/subjects", subjects), ("GET", "/subjects/{subject}/versions", versions),
        ("GET", "/subjects/{subject}/versions/{number}", version),
        ("GET", "/subjects/{subject}/versions/{number}/schema", version_schema),
        ("GET", "/schemas/ids/{schema_id}", by_id), ("POST", "/subjects/{subject}/versions", register),
        ("POST", "/subjects/{subject}", lookup),
        ("POST", "/compatibility/subjects/{subject}/versions/{number}", compatibility),
        ("POST", "/compatibility/subjects/{subject}/versions", compatibility),
        ("GET", "/config", get_config), ("GET", "/config/{subject}", get_config),
        ("PUT", "/config", set_config), ("PUT", "/config/{subject}", set_config),
        ("POST", "/v1/topics/{topic}/contract", topic_contract),
    ]
    for method, path, handler in routes:
        app.add_api_route(path, handler, methods=[method], include_in_schema=path.startswith("/v1/"))
