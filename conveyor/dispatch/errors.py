"""Errors of the consumer dispatcher."""

from __future__ import annotations

from conveyor_sdk.errors import DispatchError  # the root, the SDK's: a client's errors are among them


class AckMetadataError(DispatchError):
    """Offset commit metadata cannot seed ack tracking.

    The dispatcher then starts from the committed offset alone: the acks above it are delivered
    again, which at-least-once allows, and the event is counted.
    """


class MalformedAckMetadataError(AckMetadataError):
    """The metadata is not an ack encoding Conveyor wrote: another tool's string, or corruption."""


class UnknownAckVersionError(AckMetadataError):
    """The metadata was written by a newer Conveyor whose layout this one cannot read."""

    def __init__(self, version: int) -> None:
        super().__init__(
            f"offset commit metadata has ack layout version {version}, which this Conveyor "
            "cannot read; upgrade the dispatcher"
        )
        self.version = version


class StaleAckMetadataError(AckMetadataError):
    """The metadata was written for another committed offset, so its acks are not about this one.

    Kafka stores offset and metadata together, so only a tool that rewrote the offset and kept the
    metadata gets here; trusting those acks could skip messages the operator meant to replay.
    """

    def __init__(self, committed_offset: int, metadata_base: int) -> None:
        super().__init__(
            f"offset commit metadata records acks above offset {metadata_base}, but the committed "
            f"offset is {committed_offset}; the acks are ignored"
        )
        self.committed_offset = committed_offset
        self.metadata_base = metadata_base


class AccessError(DispatchError):
    """A client may not read what it asked for; the server answers with a gRPC status."""


class UnknownTopic(AccessError):
    """The topic is not declared in platform.yaml, or not on the dispatcher's cluster."""


class UnknownGroup(AccessError):
    """Groups are named after a consumer service of the topic: ``<service>`` or ``<service>.<name>``."""


class ForeignGroup(AccessError):
    """The group belongs to another consumer service of the topic."""


class NodeStopping(DispatchError):
    """The node is shutting down and takes no new subscriptions; clients go to another node."""


class GroupInUse(DispatchError):
    """The group id is taken by a consumer group, and Kafka keeps one type per group id: the share
    backend needs a group name that no consumer group uses (or the old group deleted)."""


class ReaderStopped(DispatchError):
    """The reader of a (topic, group) stopped (idle, failed or the node stopping) between a stream
    looking it up and connecting to it; the stream looks again and gets a fresh one."""


class ReaderLimit(DispatchError):
    """A new (topic, group) would take the node past ``dispatch.max_readers`` or the service past
    ``dispatch.max_readers_per_service``; the server answers RESOURCE_EXHAUSTED."""

    def __init__(self, message: str, setting: str) -> None:
        super().__init__(message)
        self.setting = setting
