"""Service tokens and topic ACLs from platform.yaml, for every service that lets others in (the
gateway for producers, the dispatcher for consumers).

Tokens are stored only as hashes: a SHA-256 digest (``token_sha256``), looked up at once, or a
salted scrypt hash (``token_scrypt``), slow to guess from a leaked platform file and so verified
once per distinct presented token and process, then remembered by the token's digest. No service
holds a plaintext token or logs one.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from conveyor.config import Platform
from conveyor.errors import Refusal


class AccessDenied(Refusal):
    """Who is asking, or what they may do, refuses the request."""

    status, reason = 403, "forbidden"


class Unauthenticated(AccessDenied):
    status, reason = 401, "unauthenticated"


class Forbidden(AccessDenied):
    status, reason = 403, "forbidden"


#: scrypt's cost: N = 2^15, r = 8, p = 1 takes about 50 ms and 32 MiB per hash.
SCRYPT_LOG2_N, SCRYPT_R, SCRYPT_P = 15, 8, 1
#: Presented tokens whose scrypt verdict is remembered, before the memory starts over.
_VERDICTS = 10_000


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _scrypt(token: str, salt: bytes, log2_n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(token.encode(), salt=salt, n=2**log2_n, r=r, p=p, maxmem=256 * r * 2**log2_n, dklen=32)


def token_scrypt(token: str) -> str:
    """A salted scrypt hash of ``token`` for platform.yaml's ``token_scrypt``."""
    salt = secrets.token_bytes(16)
    digest = _scrypt(token, salt, SCRYPT_LOG2_N, SCRYPT_R, SCRYPT_P)
    return f"scrypt${SCRYPT_LOG2_N}${SCRYPT_R}${SCRYPT_P}${salt.hex()}${digest.hex()}"


def scrypt_matches(token: str, stored: str) -> bool:
    _, log2_n, r, p, salt, digest = stored.split("$")
    return hmac.compare_digest(_scrypt(token, bytes.fromhex(salt), int(log2_n), int(r), int(p)), bytes.fromhex(digest))


class Authorizer:
    def __init__(self, platform: Platform) -> None:
        self._by_digest = {service.token_sha256: name for name, service in platform.services.items()
                           if service.token_sha256 is not None}
        self._slow = {name: service.token_scrypt for name, service in platform.services.items()
                      if service.token_scrypt is not None}
        #: Digest of a presented token -> its service (None: no service), for the scrypt hashes.
        self._verdicts: dict[str, str | None] = {}
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
        found = self._slow_service(token.strip(), digest) if self._slow else None
        if found is None:
            raise Unauthenticated("unknown service token")
        return found

    def _slow_service(self, token: str, digest: str) -> str | None:
        if digest not in self._verdicts:
            if len(self._verdicts) >= _VERDICTS:
                self._verdicts.clear()
            self._verdicts[digest] = next(
                (name for name, stored in self._slow.items() if scrypt_matches(token, stored)), None)
        return self._verdicts[digest]

    def check_producer(self, service: str, topic: str) -> None:
        if service not in self._producers.get(topic, frozenset()):
            raise Forbidden(f"service {service} is not among the producers of topic {topic}",
                            service=service, topic=topic)

    def check_consumer(self, service: str, topic: str) -> None:
        """The dispatcher's check: reading a topic takes being among its declared consumers."""
        if service not in self._consumers.get(topic, frozenset()):
            raise Forbidden(f"service {service} is not among the consumers of topic {topic}",
                            service=service, topic=topic)
