"""Service tokens and topic ACLs from platform.yaml, for every service that lets others in (the
gateway for producers, the dispatcher for consumers).

Tokens are stored only as hashes: a SHA-256 digest (``token_sha256``), looked up at once, or a
salted scrypt hash (``token_scrypt``), slow to guess from a leaked platform file and so verified
with bounds (TokenBook). No service holds a plaintext token or logs one.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping

from conveyor.config import Platform
from conveyor.config.tokens import TokenHash
from conveyor.errors import Refusal


class AccessDenied(Refusal):
    """Who is asking, or what they may do, refuses the request."""

    status, reason = 403, "forbidden"


class Unauthenticated(AccessDenied):
    status, reason = 401, "unauthenticated"


class Forbidden(AccessDenied):
    status, reason = 403, "forbidden"


class TooManyAttempts(AccessDenied):
    """Unknown tokens from one address past the rate, or every scrypt slot busy: refused unhashed."""

    status, reason = 429, "too_many_attempts"

    def __init__(self, message: str, retry_after: int) -> None:
        self.retry_after = retry_after
        super().__init__(message, retry_after=retry_after)


#: scrypt's cost: N = 2^15, r = 8, p = 1 takes about 50 ms and 32 MiB per hash.
SCRYPT_LOG2_N, SCRYPT_R, SCRYPT_P = 15, 8, 1
#: Unknown tokens remembered as such (least recently presented forgotten first); known ones are
#: kept apart, so a flood of garbage cannot push out the verdict of a real token.
_REJECTED = 10_000
#: scrypt hashes computed at once per process, how long a request waits for a slot, and the
#: unknown tokens one address may present per minute before it is refused without a hash.
SCRYPT_SLOTS, SLOT_WAIT_S, UNKNOWN_PER_MINUTE = 2, 2.0, 20
_ADDRESSES = 10_000


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


def presented_token(authorization: str | None) -> str:
    """The token of a ``Bearer <token>`` header, or the password of a ``Basic`` one (how Schema
    Registry clients send credentials: ``basic.auth.user.info`` is ``<any name>:<token>``)."""
    if not authorization:
        raise Unauthenticated("missing Authorization header (expected: Bearer <service token>)")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() == "basic" and token.strip():
        try:
            token = base64.b64decode(token.strip(), validate=True).decode().partition(":")[2]
        except (ValueError, UnicodeDecodeError):
            raise Unauthenticated("Basic credentials must be base64 of <name>:<service token>") from None
        if token:
            return token
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated("Authorization must be: Bearer <service token>, or Basic with the token as the password")
    return token.strip()


class TokenBook:
    """Who a presented token belongs to, from the hashes of platform.yaml.

    SHA-256 digests answer at once. A scrypt hash costs about 50 ms of CPU, so its verification is
    bounded: at most ``SCRYPT_SLOTS`` at once (a request that finds none free within
    ``SLOT_WAIT_S`` is refused), each token verified once (the verdict is remembered by its
    digest), and an address that presents more than ``UNKNOWN_PER_MINUTE`` unknown tokens in a
    minute is refused without a hash until the minute is over. Thread-safe: the dispatcher's gRPC
    threads and the gateway's worker threads share one book.
    """

    def __init__(self, hashes: Mapping[str, TokenHash], clock: Callable[[], float] = time.monotonic) -> None:
        self._by_digest = {h.token_sha256: name for name, h in hashes.items() if h.token_sha256 is not None}
        self._slow = {name: h.token_scrypt for name, h in hashes.items() if h.token_scrypt is not None}
        self._known: dict[str, str] = {}
        self._rejected: OrderedDict[str, None] = OrderedDict()
        #: Address -> (the minute's start, unknown tokens presented in it).
        self._attempts: OrderedDict[str, tuple[float, int]] = OrderedDict()
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(SCRYPT_SLOTS)
        self._clock = clock

    def decided(self, token: str) -> bool:
        """Whether name_of answers ``token`` without computing a scrypt hash."""
        if not self._slow:  # the usual case, on every request: no digest, no lock
            return True
        digest = token_digest(token)
        with self._lock:
            return (digest in self._known or digest in self._rejected
                    or any(hmac.compare_digest(known, digest) for known in self._by_digest))

    def name_of(self, token: str, address: str = "") -> str | None:
        """The name whose hash ``token`` matches, or None. Raises TooManyAttempts (429)."""
        digest = token_digest(token)
        for known, name in self._by_digest.items():
            if hmac.compare_digest(known, digest):
                return name
        if not self._slow:
            return None
        with self._lock:
            if digest in self._known:
                return self._known[digest]
            if digest in self._rejected:
                self._rejected.move_to_end(digest)
                return None
            self._check_rate(address)
        if not self._slots.acquire(timeout=SLOT_WAIT_S):
            raise TooManyAttempts("every token verification slot is busy; retry later", retry_after=1)
        try:
            found = next((name for name, stored in self._slow.items() if scrypt_matches(token, stored)), None)
        finally:
            self._slots.release()
        with self._lock:
            if found is not None:
                self._known[digest] = found
            else:
                self._rejected[digest] = None
                if len(self._rejected) > _REJECTED:
                    self._rejected.popitem(last=False)
                self._count_unknown(address)
        return found

    def _check_rate(self, address: str) -> None:
        start, count = self._attempts.get(address, (0.0, 0))
        if self._clock() - start < 60 and count >= UNKNOWN_PER_MINUTE:
            raise TooManyAttempts(f"more than {UNKNOWN_PER_MINUTE} unknown tokens from {address or 'this client'} "
                                  "within a minute", retry_after=max(1, round(60 - (self._clock() - start))))

    def _count_unknown(self, address: str) -> None:
        now = self._clock()
        start, count = self._attempts.pop(address, (now, 0))
        self._attempts[address] = (start, count + 1) if now - start < 60 else (now, 1)
        if len(self._attempts) > _ADDRESSES:
            self._attempts.popitem(last=False)


class Authorizer:
    def __init__(self, platform: Platform) -> None:
        self.tokens = TokenBook(platform.services)
        self.learn_topics(platform)

    def learn_topics(self, platform: Platform) -> None:
        """Take ``platform``'s topics' producers and consumers (a topic granted since the start)."""
        self._producers = {topic: frozenset(spec.producers) for topic, spec in platform.topics.items()}
        self._consumers = {topic: frozenset(spec.consumers) for topic, spec in platform.topics.items()}
        self._requesters = frozenset(platform.topic_requests.allowed)

    def decided(self, authorization: str | None) -> bool:
        """Whether service_of answers without computing a scrypt hash (so on an event loop)."""
        try:
            return self.tokens.decided(presented_token(authorization))
        except Unauthenticated:
            return True

    def service_of(self, authorization: str | None, address: str = "") -> str:
        """The service a ``Bearer <token>`` header belongs to; ``address``: the client's, for the
        rate of unknown tokens."""
        found = self.tokens.name_of(presented_token(authorization), address)
        if found is None:
            raise Unauthenticated("unknown service token")
        return found

    def check_producer(self, service: str, topic: str) -> None:
        if service not in self._producers.get(topic, frozenset()):
            raise Forbidden(f"service {service} is not among the producers of topic {topic}",
                            service=service, topic=topic)

    def check_requester(self, service: str) -> None:
        if service not in self._requesters:
            raise Forbidden(f"service {service} may not request topics (platform.yaml: topic_requests.allowed)",
                            service=service)

    def check_consumer(self, service: str, topic: str) -> None:
        """The dispatcher's check: reading a topic takes being among its declared consumers."""
        if service not in self._consumers.get(topic, frozenset()):
            raise Forbidden(f"service {service} is not among the consumers of topic {topic}",
                            service=service, topic=topic)
