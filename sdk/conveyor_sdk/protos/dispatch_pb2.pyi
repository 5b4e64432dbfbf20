from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LocateRequest(_message.Message):
    __slots__ = ("topic", "group")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    topic: str
    group: str
    def __init__(self, topic: _Optional[str] = ..., group: _Optional[str] = ...) -> None: ...

class Node(_message.Message):
    __slots__ = ("address", "partitions")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    address: str
    partitions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, address: _Optional[str] = ..., partitions: _Optional[_Iterable[int]] = ...) -> None: ...

class LocateResponse(_message.Message):
    __slots__ = ("nodes",)
    NODES_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[Node]
    def __init__(self, nodes: _Optional[_Iterable[_Union[Node, _Mapping]]] = ...) -> None: ...

class Ids(_message.Message):
    __slots__ = ("partitions", "offsets")
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedScalarFieldContainer[int]
    offsets: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, partitions: _Optional[_Iterable[int]] = ..., offsets: _Optional[_Iterable[int]] = ...) -> None: ...

class Subscribe(_message.Message):
    __slots__ = ("topic", "group", "credit")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    CREDIT_FIELD_NUMBER: _ClassVar[int]
    topic: str
    group: str
    credit: int
    def __init__(self, topic: _Optional[str] = ..., group: _Optional[str] = ..., credit: _Optional[int] = ...) -> None: ...

class Nack(_message.Message):
    __slots__ = ("ids", "retry_delay_ms")
    IDS_FIELD_NUMBER: _ClassVar[int]
    RETRY_DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    ids: Ids
    retry_delay_ms: int
    def __init__(self, ids: _Optional[_Union[Ids, _Mapping]] = ..., retry_delay_ms: _Optional[int] = ...) -> None: ...

class ReadRequest(_message.Message):
    __slots__ = ("subscribe", "acks", "nacks", "credit")
    SUBSCRIBE_FIELD_NUMBER: _ClassVar[int]
    ACKS_FIELD_NUMBER: _ClassVar[int]
    NACKS_FIELD_NUMBER: _ClassVar[int]
    CREDIT_FIELD_NUMBER: _ClassVar[int]
    subscribe: Subscribe
    acks: Ids
    nacks: _containers.RepeatedCompositeFieldContainer[Nack]
    credit: int
    def __init__(self, subscribe: _Optional[_Union[Subscribe, _Mapping]] = ..., acks: _Optional[_Union[Ids, _Mapping]] = ..., nacks: _Optional[_Iterable[_Union[Nack, _Mapping]]] = ..., credit: _Optional[int] = ...) -> None: ...

class Header(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: bytes
    def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...

class Message(_message.Message):
    __slots__ = ("partition", "offset", "key", "value", "headers", "timestamp_ms", "attempt")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    partition: int
    offset: int
    key: bytes
    value: bytes
    headers: _containers.RepeatedCompositeFieldContainer[Header]
    timestamp_ms: int
    attempt: int
    def __init__(self, partition: _Optional[int] = ..., offset: _Optional[int] = ..., key: _Optional[bytes] = ..., value: _Optional[bytes] = ..., headers: _Optional[_Iterable[_Union[Header, _Mapping]]] = ..., timestamp_ms: _Optional[int] = ..., attempt: _Optional[int] = ...) -> None: ...

class ReadResponse(_message.Message):
    __slots__ = ("messages", "committed")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    committed: Ids
    def __init__(self, messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ..., committed: _Optional[_Union[Ids, _Mapping]] = ...) -> None: ...
