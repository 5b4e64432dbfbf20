"""Service tokens and topic ACLs from platform.yaml, for every service that lets others in (the
gateway for producers, the dispatcher for consumers).

Tokens are stored only as SHA-256 digests (platform.yaml's ``token_sha256``); a presented token
is hashed and looked up, so no service holds a plaintext token or logs one.
"""

from __future__ import annotations

import hashlib
import hmac

from conveyor.config import Platform
from conveyor.errors import Refusal


class AccessDenied(Refusal):
    """Who is asking, or what they may do, refuses the request."""

    status, reason = 403, "forbidden"


class Unauthenticated(AccessDenied):
    status, reason = 401, "unauthenticated"


class Forbidden(AccessDenied):
    status, reason = 403, "forbidden"


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Authorizer:
    def __init__(self, platform: Platform) -> None:
        self._by_digest = {service.token_sha256: name for name, service in platform.services.items()}
        self._producers = {topic: frozenset(spec.producers) for topic, spec in platform.topics.items()}
        self._consumers = {topic: frozenset(spec.consumers) for topic, spec in platform.topics.items()}

    def service_of(self, authorization: str | None) -> str:
        """The service a ``Bearer <token>`` header belongs to."""
        if not authorization:
            raise Unauthenticated("missing Authorization header (expected: Bearer <service token>)")
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated("Authorization must be: Bearer <service token>")
        digest = token_digest(token.strip())
        for known, service in self._by_digest.items():
            if hmac.compare_digest(known, digest):
                return service
        raise Unauthenticated("unknown service token")

    def check_producer(self, service: str, topic: str) -> None:
        if service not in self._producers.get(topic, frozenset()):
            raise Forbidden(f"service {service} is not among the producers of topic {topic}",
                            service=service, topic=topic)

    def check_consumer(self, service: str, topic: str) -> None:
        """The dispatcher's check: reading a topic takes being among its declared consumers."""
        if service not in self._consumers.get(topic, frozenset()):
            raise Forbidden(f"service {service} is not among the consumers of topic {topic}",
                            service=service, topic=topic)
