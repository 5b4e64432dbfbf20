"""The contract registry, kept in a compacted topic of the read cluster (contracts.topic, one
partition): every process that serves or reads a topic follows it, and every new version, every
topic request and the registrar's decision on it are written through it. Nothing lives on a
host's disk.

Reading: :class:`Registry` reads the topic from its start and keeps following it on a thread of
its own (read committed), so a version registered anywhere reaches every follower within a poll.

Writing: one writer at a time across every host, with no election. Each write is a Kafka
transaction under one transactional id: starting it (``init_transactions``) fences any write still
in flight elsewhere, whose commit then fails and is tried again from the start. Between the fence
and its commit a write reads the topic to its end, so the version number and the id a registration
picks are the next ones, two registrations never take the same, and two requests for one name
are taken in order.
"""

from __future__ import annotations

import itertools
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, TypeVar

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from conveyor import kafka
from conveyor.bus.registry_state import (RegistryState, RequestRecord, RequestState, Version, canonical, config_record,
                                         request_record, topic_of, version_record)
from conveyor.bus.requests import check_asked, granted_topics
from conveyor.config import Compatibility, Platform, read_contract
from conveyor.config.problems import NotSetError
from conveyor.config.contracts import REGISTRY_GROUP_PREFIX, REGISTRY_TRANSACTIONAL_ID
from conveyor.errors import Refusal
from conveyor.topics.compatibility import Incompatibility, check
from conveyor.topics.contracts import ContractError, compile_contract
from conveyor.topics.sink_fit import sink_conflicts

log = logging.getLogger("conveyor.registry")

#: Seconds a registration waits for the coordinator, the topic's end, or its own record.
TIMEOUT = 30.0
#: Seconds a write fenced by others in flight goes on trying: gateways started together each
#: register their contracts at once, and each attempt fences whichever is in flight.
WRITE_DEADLINE = 120.0
#: The longest pause between two attempts; each pause is random up to a bound that doubles from
#: 0.1 s, so writers that fenced each other come back apart instead of in step.
BACKOFF_CAP = 2.0
T = TypeVar("T")


class InvalidContract(Refusal):
    """The schema is not a contract this platform can enforce (conveyor.topics.contracts)."""

    status, reason = 422, "invalid_contract"


class IncompatibleContract(Refusal):
    """The version breaks its subject's compatibility rule; nothing was registered."""

    status, reason = 409, "incompatible_contract"


class UnknownSubject(Refusal):
    status, reason = 404, "subject_not_found"


class RegistryUnavailable(Refusal):
    """The registry's topic could not be read to its end or written in time; asking again finishes it."""

    status, reason = 503, "registry_unavailable"


class RegistryMissing(RegistryUnavailable):
    """The registry's topic is not on its cluster: `conveyor topics apply` creates it."""


@dataclass(frozen=True)
class Registration:
    version: Version
    #: False when the subject already had this schema (registering it again changes nothing).
    created: bool


def refusal(subject: str, rule: Compatibility, found: list[Incompatibility]) -> IncompatibleContract:
    """The 409 for a version with incompatibilities: the first one said, every one in the body
    (the rule, the field, old and new, and the sink that cannot take it)."""
    first = found[0]
    said = f"the new version breaks rule {rule.value}" if first.sink is None else "a sink cannot take the new version"
    return IncompatibleContract(f"{subject}: {said}: {first.message}", subject=subject, rule=rule.value,
                                incompatibilities=[{"field": i.field, "kind": i.kind, "old": i.old, "new": i.new,
                                                    "version": i.version, "sink": i.sink, "message": i.message}
                                                   for i in found])


class Registry:
    """The registry as one process sees it: no I/O until :meth:`start`."""

    def __init__(self, platform: Platform, client_id: str) -> None:
        self.platform = platform
        self.cluster = platform.registry_cluster
        self.topic = platform.contracts.topic
        self.client_id = client_id
        self.state = RegistryState()
        #: The next offset the follower will read (control records counted).
        self.position = 0
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._asking = threading.Lock()
        self._end_reader: Any = None

    # -- following -------------------------------------------------------------------------------

    def follow(self) -> None:
        """Follow the topic from its start on a thread of its own, without waiting for it: for a
        part that works with what it holds meanwhile (a replicator worker copying declared topics)."""
        self._stop.clear()
        consumer = kafka.consumer(self.platform, self.cluster, f"{REGISTRY_GROUP_PREFIX}{self.client_id}", self.client_id,
                                  {"isolation.level": "read_committed", "enable.auto.commit": False})
        consumer.assign([TopicPartition(self.topic, 0, OFFSET_BEGINNING)])
        self._thread = threading.Thread(target=self._follow, args=(consumer,), name="registry", daemon=True)
        self._thread.start()

    def start(self, timeout: float = TIMEOUT) -> None:
        """Read the topic to its end, then keep following it."""
        self.follow()
        try:
            self.wait_caught_up(timeout)
        except RegistryMissing:
            raise  # still followed: versions count from the topic's creation; stop() ends it
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        with self._asking:
            if self._end_reader is not None:
                self._end_reader.close()
                self._end_reader = None

    def _follow(self, consumer: Any) -> None:
        try:
            while not self._stop.is_set():
                message = consumer.poll(0.5)
                with self._changed:
                    if message is not None and message.error() is None:
                        self.state.apply(message.key(), message.value())
                    elif message is not None and message.error().code() != KafkaError._PARTITION_EOF:
                        log.warning("contract registry: %s", message.error())
                    position = consumer.position([TopicPartition(self.topic, 0)])[0].offset
                    if position >= 0 and position != self.position:
                        self.position = position
                        self._changed.notify_all()
        finally:
            consumer.close()

    def end_offset(self, timeout: float = TIMEOUT) -> int:
        """The topic's end now (one round trip: a reader that asks once a batch keeps its connection)."""
        with self._asking:
            if self._end_reader is None:
                # Uncommitted: the log's end. A committed reader's end is the stable offset, and
                # Kafka answers a commit before it writes the markers that move it, so a registration
                # would return before its own follower could hold it.
                self._end_reader = kafka.consumer(self.platform, self.cluster, f"{REGISTRY_GROUP_PREFIX}{self.client_id}",
                                                  f"{self.client_id}-end", {"isolation.level": "read_uncommitted"})
            deadline = time.monotonic() + timeout
            while True:
                try:
                    return self._end_reader.get_watermark_offsets(TopicPartition(self.topic, 0), timeout=timeout,
                                                                  cached=False)[1]
                except KafkaException as err:
                    # A leader moving (a topic just made, a broker restarting) passes; ask again until the deadline.
                    moving = err.args[0].code() in (KafkaError.NOT_LEADER_FOR_PARTITION,
                                                    KafkaError.LEADER_NOT_AVAILABLE)
                    if moving and time.monotonic() < deadline:
                        time.sleep(0.5)
                        continue
                    missing = err.args[0].code() in (KafkaError._UNKNOWN_PARTITION, KafkaError.UNKNOWN_TOPIC_OR_PART)
                    raise (RegistryMissing if missing else RegistryUnavailable)(
                        f"the contract registry ({self.topic} on {self.cluster}) cannot be read: {err.args[0].str()}"
                        + ("; `conveyor topics apply` creates it" if missing else "")) from None

    def wait_caught_up(self, timeout: float = TIMEOUT, end: int | None = None) -> None:
        """Return once the follower has read up to ``end`` (default: the topic's end now)."""
        target = self.end_offset(timeout) if end is None else end
        deadline = time.monotonic() + timeout
        with self._changed:
            while self.position < target:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RegistryUnavailable(f"the contract registry was read to offset {self.position} of "
                                              f"{target} in {timeout:g} s")
                self._changed.wait(min(left, 0.5))

    def latest(self, topic: str) -> Version | None:
        """The topic's latest version (None: the registry has none), without waiting on the follower."""
        return self.state.newest.get(topic)

    @contextmanager
    def reading(self) -> Iterator[RegistryState]:
        """The state, held still while the caller reads several things of it."""
        with self._changed:
            yield self.state

    # -- asking and registering ------------------------------------------------------------------

    def incompatibilities(self, subject: str, schema: Any, against: int | None = None) -> tuple[Compatibility,
                                                                                              list[Incompatibility]]:
        """The subject's rule and what ``schema`` breaks of it: against every version the rule
        asks for, or ``against`` one version alone; then what the topic's sinks cannot take of it
        after every version (conveyor.topics.sink_fit), whatever the rule."""
        _compile(subject, schema)
        with self._changed:
            rule = self.state.rule(subject, self.platform)
            versions = [(v.version, v.parsed) for v in self.state.versions(subject)]
        compared = versions
        if against is not None:
            compared = [(n, s) for n, s in versions if n == against]
            if not compared:
                raise UnknownSubject(f"subject {subject} has no version {against}", subject=subject)
            rule = Compatibility(rule.value.removesuffix("_TRANSITIVE"))
        topic = topic_of(subject)
        sinks = [] if topic is None else sink_conflicts(self.platform, topic, versions, schema)
        return rule, check(rule, schema, compared) + sinks

    def register(self, subject: str, schema: Any, by: str) -> Registration:
        """Register ``schema`` as the subject's next version, held to its rule; the version it
        already is, when it is one."""
        _compile(subject, schema)
        text = canonical(schema)

        def step() -> tuple[Registration, list[tuple[bytes, bytes]]]:
            with self._changed:
                existing = self.state.find(subject, text)
                if existing is not None:
                    return Registration(existing, created=False), []
                latest = self.state.latest(subject)
                number = 1 if latest is None else latest.version + 1
                version = Version(subject, number, self.state.id_for(text), text, by,
                                  datetime.now(timezone.utc).isoformat(timespec="seconds"))
            rule, found = self.incompatibilities(subject, schema)
            if found:
                raise refusal(subject, rule, found)
            log.info("registering %s version %d (id %d) for %s", subject, version.version, version.id, by)
            return Registration(version, created=True), [version_record(version)]

        return self._transact(f"registering {subject}", step)

    def submit(self, asked: RequestRecord) -> tuple[RequestRecord, bool]:
        """Record a topic request for the provisioner: (the request held, whether it is new). The
        same request asked again is the one held; a name taken or a cap passed is refused and
        nothing is written (conveyor.bus.requests.check_asked)."""
        now = datetime.fromisoformat(asked.requested_at)

        def step() -> tuple[tuple[RequestRecord, bool], list[tuple[bytes, bytes]]]:
            with self._changed:
                held = check_asked(self.platform, self.state.requests, asked, now)
            return ((held, False), []) if held is not None else ((asked, True), [request_record(asked)])

        return self._transact(f"requesting {asked.topic}", step)

    def decide(self, pending: RequestRecord, decision: RequestRecord) -> bool:
        """Write the provisioner's decision on ``pending``, unless the request changed meanwhile
        (another provisioner decided it, or it was asked again after a refusal)."""
        def step() -> tuple[bool, list[tuple[bytes, bytes]]]:
            with self._changed:
                current = self.state.requests.get(pending.topic) == pending
            return (True, [request_record(decision)]) if current else (False, [])

        return self._transact(f"deciding the request for {pending.topic}", step)

    def wait_decided(self, topic: str, timeout: float) -> RequestRecord | None:
        """The request for ``topic`` once it is no longer pending, or None after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                record = self.state.requests.get(topic)
                if record is not None and record.state != RequestState.pending:
                    return record
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._changed.wait(min(left, 0.5))

    def _transact(self, what: str, step: Callable[[], tuple[T, list[tuple[bytes, bytes]]]]) -> T:
        """Run ``step`` on the registry read to its end under the registry's one transactional id
        (which fences any writer still in flight elsewhere), then write the records it returns in
        one transaction; a step fenced or interrupted is run again from the start."""
        deadline = time.monotonic() + WRITE_DEADLINE
        for attempt in itertools.count():
            producer = kafka.producer(self.platform, self.cluster, self.client_id,
                                      {"transactional.id": REGISTRY_TRANSACTIONAL_ID, "transaction.timeout.ms": 60_000})
            try:
                producer.init_transactions(TIMEOUT)  # fences any writer still in flight
                self.wait_caught_up()
                result, records = step()
                if not records:
                    return result
                producer.begin_transaction()
                for key, value in records:
                    producer.produce(self.topic, value, key, partition=0)
                producer.commit_transaction(TIMEOUT)
                self.wait_caught_up()
                return result
            except KafkaException as err:
                error = err.args[0]
                # Writers of the one transactional id fence each other: one fenced in the middle of
                # its commit may get a fatal or abortable error instead of a fencing code (gateways
                # starting together saw "EndTxn commit failed: Unknown broker error"). Each attempt
                # is a new producer, and reads the registry again, so it is safe to go again.
                again = error.retriable() or error.code() in _FENCED or error.fatal() or error.txn_requires_abort()
                pause = random.uniform(0, min(BACKOFF_CAP, 0.1 * 2 ** attempt))
                if not again or time.monotonic() + pause > deadline:
                    raise RegistryUnavailable(f"{what} failed: {error.str()}") from None
                log.info("%s: fenced or interrupted (%s); trying again in %.2f s", what, error.str(), pause)
                time.sleep(pause)
        raise AssertionError("unreachable")

    def set_rule(self, subject: str | None, rule: Compatibility) -> None:
        """A subject's rule (None: the registry's own), kept in the topic."""
        producer = kafka.producer(self.platform, self.cluster, self.client_id)
        key, value = config_record(subject, rule)
        producer.produce(self.topic, value, key, partition=0)
        if producer.flush(TIMEOUT):
            raise RegistryUnavailable(f"the rule of {subject or 'the registry'} was not written in {TIMEOUT:g} s")
        self.wait_caught_up()


_FENCED = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH,
           KafkaError.CONCURRENT_TRANSACTIONS, KafkaError.COORDINATOR_LOAD_IN_PROGRESS}


def _compile(subject: str, schema: Any) -> None:
    if not isinstance(schema, dict):
        raise InvalidContract(f"{subject}: a contract is a JSON object (a JSON Schema), not {type(schema).__name__}")
    try:
        compile_contract(topic_of(subject) or subject, schema)
    except ContractError as err:
        raise InvalidContract(str(err), subject=subject) from None


def register_contract_files(platform: Platform) -> list[Version]:
    """Register every declared topic's contract file as its subject's version (``topics apply``):
    the versions that are new; nothing where the file is a version already. Each is held to its
    subject's rule, as a version registered through a gateway is."""
    if platform.contracts.topic not in platform.topics:
        return []
    registry = Registry(platform, "conveyor-topics-apply")
    try:
        registry.start()
        created = []
        for topic, spec in sorted(platform.topics.items()):
            if spec.contract is not None:
                registered = registry.register(f"{topic}-value", read_contract(platform, topic), "platform.yaml")
                if registered.created:
                    created.append(registered.version)
        return created
    finally:
        registry.stop()


def _read_once(platform: Platform, client_id: str, read: Callable[[RegistryState], T], empty: T) -> T:
    """``read`` of the registry as it is now, for a reader that takes it once; ``empty`` without a
    registry, while its topic does not exist yet (then no gateway has written to it), or while its
    cluster has no address (not started: the command fails where it connects, saying so)."""
    if platform.contracts.topic not in platform.topics:
        return empty
    registry = Registry(platform, client_id)
    try:
        registry.start()
        with registry.reading() as state:
            return read(state)
    except (RegistryMissing, NotSetError):
        return empty
    finally:
        registry.stop()


def topic_versions(platform: Platform, topic: str) -> list[Version]:
    """The registry's versions of a topic's contract as of now, oldest first (none without a
    registry): for a reader that takes them once, such as a lake run."""
    part = platform.part.value if platform.part else "admin"
    return _read_once(platform, f"conveyor-{part}-{topic}", lambda state: state.versions(f"{topic}-value"), [])


def with_granted(platform: Platform) -> Platform:
    """``platform`` with the topics granted through the bus as the registry holds them now: for a
    command that takes them once (topics plan and apply, acl plan and apply, a lake run)."""
    part = platform.part.value if platform.part else "admin"
    requested = _read_once(platform, f"conveyor-{part}-requests", lambda state: granted_topics(state.requests), {})
    return platform.with_requested(requested)
