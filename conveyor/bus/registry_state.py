"""The contract registry's state, as its compacted topic's records build it. Pure: the records are
read and written by conveyor.bus.registry.

Subjects are named as Confluent Schema Registry names them for record values, ``<topic>-value``.
Each version has a number (1, 2, ... per subject), an id (unique across the registry; one schema
text registered under two subjects keeps one id, as Confluent's does), the schema, who registered
it and when. The records, keyed so that compaction keeps each one:

- ``version|<subject>|<number>``: a version, its value the JSON of :class:`Version`;
- ``config|<subject>``: a subject's compatibility rule; ``config|`` the registry's own;
- ``request|<topic>``: a topic request (conveyor.bus.requests) and the provisioner's decision on it,
  the value the JSON of :class:`RequestRecord`. Every host learns the requested topics here.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from conveyor_sdk.contract import ContractVersion

from conveyor.config import Compatibility, Platform

SUBJECT_SUFFIX = "-value"


def subject_of(topic: str) -> str:
    return f"{topic}{SUBJECT_SUFFIX}"


def topic_of(subject: str) -> str | None:
    """The topic a subject names; None for a subject of another form (``<topic>-key``, a record name)."""
    return subject[: -len(SUBJECT_SUFFIX)] if subject.endswith(SUBJECT_SUFFIX) else None


def canonical(schema: Any) -> str:
    """A schema's text as the registry keeps and compares it: keys sorted, no spaces."""
    return json.dumps(schema, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class Version:
    subject: str
    version: int
    id: int
    #: The schema's canonical text (:func:`canonical`).
    schema: str
    registered_by: str
    registered_at: str

    @property
    def parsed(self) -> Any:
        return json.loads(self.schema)


def verdict(version: Version) -> tuple[str, bytes]:
    """The record header that says which version an event was checked against (its size is kept
    free by conveyor.limits.GATEWAY_HEADERS_MAX); the replicator copies it with the record."""
    return ContractVersion(version.id, version.version).header()


def version_key(subject: str, number: int) -> bytes:
    return f"version|{subject}|{number}".encode()


def config_key(subject: str | None) -> bytes:
    return f"config|{subject or ''}".encode()


def version_record(version: Version) -> tuple[bytes, bytes]:
    return version_key(version.subject, version.version), json.dumps(asdict(version)).encode()


def config_record(subject: str | None, rule: Compatibility) -> tuple[bytes, bytes]:
    return config_key(subject), json.dumps({"compatibility": rule.value}).encode()


class RequestState:
    """Where a topic request stands: asked, then granted or refused by the provisioner."""

    pending, granted, refused = "pending", "granted", "refused"


@dataclass(frozen=True)
class RequestRecord:
    topic: str
    #: The topic's declaration as platform.yaml would hold it (conveyor.config.Topic, as JSON).
    declaration: dict[str, Any]
    #: The contract's canonical text: version 1 of the topic's subject once granted.
    contract: str
    requested_by: str
    requested_at: str
    state: str = RequestState.pending
    decided_at: str | None = None
    #: A refusal's body (error, message and its figures), as the gateway answers it.
    refusal: dict[str, Any] | None = None

    @property
    def partitions(self) -> int:
        return int(self.declaration["partitions"])


def request_key(topic: str) -> bytes:
    return f"request|{topic}".encode()


def request_record(record: RequestRecord) -> tuple[bytes, bytes]:
    return request_key(record.topic), json.dumps(asdict(record)).encode()


@dataclass
class RegistryState:
    """Every subject's versions and rules, as the records so far make them."""

    #: subject -> version number -> version.
    subjects: dict[str, dict[int, Version]] = field(default_factory=dict)
    by_id: dict[int, Version] = field(default_factory=dict)
    #: subject (None: the registry's own) -> rule.
    rules: dict[str | None, Compatibility] = field(default_factory=dict)
    #: topic -> its latest version, kept as records come: the gateway asks it for every request.
    newest: dict[str, Version] = field(default_factory=dict)
    #: topic -> the latest request for it, whatever its state.
    requests: dict[str, RequestRecord] = field(default_factory=dict)

    def apply(self, key: bytes, value: bytes | None) -> None:
        """Take one record of the topic (a tombstone, ``value`` None, deletes what its key held)."""
        kind, _, rest = key.decode().partition("|")
        if kind == "version":
            subject, _, number = rest.rpartition("|")
            if value is None:
                self.subjects.get(subject, {}).pop(int(number), None)
            else:
                version = Version(**json.loads(value))
                self.subjects.setdefault(subject, {})[version.version] = version
                self.by_id.setdefault(version.id, version)
            topic = topic_of(subject)
            if topic is not None:
                latest = self.latest(subject)
                if latest is None:
                    self.newest.pop(topic, None)
                else:
                    self.newest[topic] = latest
        elif kind == "request":
            if value is None:
                self.requests.pop(rest, None)
            else:
                self.requests[rest] = RequestRecord(**json.loads(value))
        elif kind == "config":
            if value is None:
                self.rules.pop(rest or None, None)
            else:
                self.rules[rest or None] = Compatibility(json.loads(value)["compatibility"])

    def versions(self, subject: str) -> list[Version]:
        """A subject's versions, oldest first (empty: no such subject)."""
        held = self.subjects.get(subject, {})
        return [held[n] for n in sorted(held)]

    def latest(self, subject: str) -> Version | None:
        versions = self.versions(subject)
        return versions[-1] if versions else None

    def find(self, subject: str, schema: str) -> Version | None:
        """The subject's version of this canonical schema text, if it has one."""
        return next((v for v in self.versions(subject) if v.schema == schema), None)

    def id_for(self, schema: str) -> int:
        """The id a schema text gets: the one it already has under any subject, else the next."""
        for version in self.by_id.values():
            if version.schema == schema:
                return version.id
        return max(self.by_id, default=0) + 1

    def rule(self, subject: str | None, platform: Platform) -> Compatibility:
        """The rule a subject's next version is held to: the subject's own setting in the registry,
        else its topic's in platform.yaml, else the registry's own setting, else contracts.compatibility."""
        if subject is not None and subject in self.rules:
            return self.rules[subject]
        topic = topic_of(subject) if subject is not None else None
        declared = platform.topics.get(topic) if topic is not None else None
        if declared is not None and declared.compatibility is not None:
            return declared.compatibility
        return self.rules.get(None, platform.contracts.compatibility)

