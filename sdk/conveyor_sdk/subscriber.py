"""Reading through the dispatcher: ``Subscriber(topic, group, handler, concurrency)``.

The subscriber asks Discovery (any of ``nodes``) which nodes serve the topic and group, opens a
Read stream to each, and runs ``handler`` on ``concurrency`` threads: a return acks the message, a
raise nacks it (``Retry(delay)`` asks for a later redelivery). Streams that break are opened again,
and the nodes are located again every ``relocate_every`` seconds, so a restarted or added node is
picked up. ``on_committed`` hears which acks a Kafka commit now carries: those messages are never
delivered again. Delivery is at least once, in no particular order. The asyncio flavour is
``conveyor_sdk.subscriber_aio.AsyncSubscriber``.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import grpc

from conveyor_sdk.contract import ContractVersion, contract_of
from conveyor_sdk.errors import DispatchError
from conveyor_sdk.protos import dispatch_pb2 as pb
from conveyor_sdk.protos import dispatch_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

#: Statuses that no retry can fix: the subscriber stops and reports them.
FATAL = frozenset({grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED,
                   grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT,
                   grpc.StatusCode.FAILED_PRECONDITION})
MessageId = tuple[int, int]


@dataclass(frozen=True)
class Message:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int
    #: 1 on the first delivery, higher on redeliveries.
    attempt: int

    @property
    def id(self) -> MessageId:
        return self.partition, self.offset

    @property
    def contract(self) -> ContractVersion | None:
        """The version of the topic's contract the gateway checked the event against: parse the
        value by it (None for a record written around the gateway, without the header)."""
        return contract_of(self.headers)


class Retry(Exception):
    """Raise from a handler to have the message delivered again, no sooner than ``delay`` seconds.

    Nodes refuse a delay above their ``dispatch.max_retry_delay`` (5 minutes by default) with
    INVALID_ARGUMENT, which stops the subscriber: a node would hold the message that long."""

    def __init__(self, delay: float = 0.0) -> None:
        super().__init__(f"retry in {delay} s")
        self.delay = delay


class SubscriberError(DispatchError):
    """The dispatcher refused the subscription (bad token, not a consumer, unknown topic or group)."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code


class NodesUnreachable(DispatchError):
    """No node of the list answered Discovery; the subscriber keeps trying."""


def messages_of(topic: str, frame: pb.ReadResponse) -> list[Message]:
    return [Message(topic, m.partition, m.offset, m.key if m.HasField("key") else None, m.value,
                    tuple((h.key, h.value) for h in m.headers), m.timestamp_ms, m.attempt)
            for m in frame.messages]


class Outgoing:
    """Acks and nacks waiting to go out, coalesced into one frame; each returns one credit."""

    def __init__(self) -> None:
        self._acks = pb.Ids()
        self._nacks: dict[int, pb.Nack] = {}
        self._finished = 0

    def __bool__(self) -> bool:
        return self._finished > 0

    def ack(self, message: Message) -> None:
        self._acks.partitions.append(message.partition)
        self._acks.offsets.append(message.offset)
        self._finished += 1

    def nack(self, message: Message, delay: float) -> None:
        delay_ms = max(0, int(delay * 1000))
        nack = self._nacks.setdefault(delay_ms, pb.Nack(retry_delay_ms=delay_ms))
        nack.ids.partitions.append(message.partition)
        nack.ids.offsets.append(message.offset)
        self._finished += 1

    def take(self) -> pb.ReadRequest:
        request = pb.ReadRequest(credit=self._finished, nacks=list(self._nacks.values()))
        if self._acks.offsets:
            request.acks.CopyFrom(self._acks)
        self.__init__()  # type: ignore[misc]
        return request


def subscribe_frame(topic: str, group: str, credit: int) -> pb.ReadRequest:
    return pb.ReadRequest(subscribe=pb.Subscribe(topic=topic, group=group, credit=credit))


def auth_metadata(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def seed_order(nodes: Sequence[str]) -> list[str]:
    """Seeds in a random order, so that clients spread their Locate calls (each node asked
    starts serving the pair) over every node."""
    return random.sample(list(nodes), len(nodes))


def open_channel(address: str, credentials: grpc.ChannelCredentials | None) -> grpc.Channel:
    """A channel to a node: over TLS with ``credentials`` (grpc.ssl_channel_credentials), else plain."""
    return grpc.insecure_channel(address) if credentials is None else grpc.secure_channel(address, credentials)


def locate(nodes: Sequence[str], topic: str, group: str, token: str, timeout: float = 10.0,
           credentials: grpc.ChannelCredentials | None = None) -> list[str]:
    """Addresses serving (topic, group), from the first seed that answers."""
    last: grpc.RpcError | None = None
    for seed in seed_order(nodes):
        with open_channel(seed, credentials) as channel:
            try:
                answer = pb_grpc.DiscoveryStub(channel).Locate(
                    pb.LocateRequest(topic=topic, group=group), metadata=auth_metadata(token), timeout=timeout)
            except grpc.RpcError as exc:
                if exc.code() in FATAL:
                    raise SubscriberError(exc.code(), exc.details()) from None
                last = exc
                continue
        return [node.address for node in answer.nodes]
    why = f"{last.code().name}: {last.details()}" if last is not None else "no node given"
    raise NodesUnreachable(f"no dispatcher node answered among {', '.join(nodes)} ({why})")


class StreamBase:
    """One Read stream to one node: the acks and nacks that wait to go out on it. A flavour says
    how its sender is woken (:meth:`_post`)."""

    def __init__(self, sub: Any, address: str) -> None:
        self.address = address
        self.closed = False
        self._sub = sub
        self._out = Outgoing()

    def ack(self, message: Message) -> None:
        self._post(lambda: self._out.ack(message))

    def nack(self, message: Message, delay: float) -> None:
        self._post(lambda: self._out.nack(message, delay))

    def _post(self, change: Callable[[], None]) -> None:
        """Apply ``change`` to the outgoing acks and wake the sender."""
        raise NotImplementedError

    def _deliver(self, frame: pb.ReadResponse) -> None:
        """Hand a frame's messages to the subscriber's handlers (its queue is never full)."""
        for message in self._sub._received(frame):
            self._sub._work.put_nowait((self, message))


class Backoff:
    """Seconds to wait before asking the nodes again: doubling from 0.1 s up to 5 s while none
    answers, back to 0.1 s once one does."""

    FIRST, MOST = 0.1, 5.0

    def __init__(self) -> None:
        self.seconds = self.FIRST

    def answered(self) -> None:
        self.seconds = self.FIRST

    def unreachable(self, error: NodesUnreachable) -> float:
        """How long to wait now (the next wait doubles)."""
        wait, self.seconds = self.seconds, min(self.seconds * 2, self.MOST)
        log.info("%s; retrying in %.1f s", error, wait)
        return wait


class _Event(Protocol):
    def set(self) -> None: ...


class SubscriberBase:
    """What both flavours share: settings, what a frame and a handler's outcome lead to."""

    #: Set by each flavour, as threading or asyncio events.
    _stopping: _Event
    _wake: _Event

    def __init__(self, topic: str, group: str, handler: Callable[[Message], Any], concurrency: int = 1, *,
                 nodes: Sequence[str], token: str, credit: int | None = None, relocate_every: float = 5.0,
                 on_committed: Callable[[list[MessageId]], None] | None = None,
                 credentials: grpc.ChannelCredentials | None = None) -> None:
        """``credentials``: TLS towards nodes that serve it (grpc.ssl_channel_credentials with
        the CA that signed their certificate); None: plain connections."""
        if concurrency < 1 or not nodes:
            raise ValueError("a subscriber needs concurrency >= 1 and at least one node address")
        self.topic, self.group, self.handler, self.token = topic, group, handler, token
        self.concurrency = concurrency
        self.credit = credit or 2 * concurrency
        self.on_committed = on_committed
        self.nodes = list(nodes)
        self.relocate_every = relocate_every
        self.credentials = credentials
        self.error: BaseException | None = None
        self._streams: dict[str, Any] = {}

    def _fail(self, error: BaseException) -> None:
        if self.error is None:
            self.error = error
            log.error("subscriber to %s/%s stops: %s", self.topic, self.group, error)
        self._wake_to_stop()

    def _wake_to_stop(self) -> None:
        # Both flavours' events (threading's, asyncio's) are set the same way.
        self._stopping.set()
        self._wake.set()

    def _received(self, frame: pb.ReadResponse) -> list[Message]:
        if frame.HasField("committed") and self.on_committed is not None:
            self.on_committed(list(zip(frame.committed.partitions, frame.committed.offsets)))
        return messages_of(self.topic, frame)

    def _stream_failed(self, error: grpc.RpcError, address: str, ending: bool) -> None:
        if error.code() in FATAL:
            self._fail(SubscriberError(error.code(), error.details() or ""))
        elif not ending:
            log.info("stream to %s ended: %s", address, error.code().name)

    def _settle(self, stream: StreamBase, message: Message, error: Exception | None) -> None:
        if error is None:
            stream.ack(message)
        elif isinstance(error, Retry):
            stream.nack(message, error.delay)
        else:
            log.error("handler failed on %s/%d@%d", self.topic, message.partition, message.offset, exc_info=error)
            stream.nack(message, 0.0)

    def _open(self, addresses: list[str], stream: Callable[[str], Any]) -> None:
        """A stream to each address without a live one."""
        for address in addresses:
            current = self._streams.get(address)
            if current is None or current.closed:
                self._streams[address] = stream(address)


class _Stream(StreamBase):
    """One Read stream to one node, on a thread of its own."""

    def __init__(self, sub: Subscriber, address: str) -> None:
        super().__init__(sub, address)
        self._cond = threading.Condition()
        self._ending = False
        self._channel = open_channel(address, sub.credentials)
        self.thread = threading.Thread(target=self._run, name=f"stream-{address}", daemon=True)
        self.thread.start()

    def _post(self, change: Callable[[], None]) -> None:
        with self._cond:
            change()
            self._cond.notify()

    def end(self) -> None:
        """Send what is pending, then close our side; the node then ends the stream."""
        with self._cond:
            self._ending = True
            self._cond.notify()

    def kill(self) -> None:
        self._channel.close()

    def _requests(self):  # type: ignore[no-untyped-def]
        sub = self._sub
        yield subscribe_frame(sub.topic, sub.group, sub.credit)
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._out) or self._ending)
                if not self._out:
                    return
                request = self._out.take()
            yield request

    def _run(self) -> None:
        sub = self._sub
        try:
            responses = pb_grpc.ReaderStub(self._channel).Read(self._requests(), metadata=auth_metadata(sub.token))
            for frame in responses:
                self._deliver(frame)
        except grpc.RpcError as exc:
            sub._stream_failed(exc, self.address, self._ending)
        finally:
            self.closed = True
            self.end()
            self._channel.close()
            sub._wake.set()


class Subscriber(SubscriberBase):
    """Threaded subscriber; use as a context manager, or ``start()`` and ``stop()``."""

    def __init__(self, topic: str, group: str, handler: Callable[[Message], object], concurrency: int = 1,
                 **options: Any) -> None:
        super().__init__(topic, group, handler, concurrency, **options)
        self._work: queue.Queue[tuple[_Stream, Message] | None] = queue.Queue()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> Subscriber:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def start(self) -> None:
        self._threads = [threading.Thread(target=self._work_loop, name=f"handler-{i}", daemon=True)
                         for i in range(self.concurrency)]
        self._threads.append(threading.Thread(target=self._manage, name="subscriber", daemon=True))
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Finish the messages being handled, send their acks, and close the streams."""
        self._wake_to_stop()
        for _ in range(self.concurrency):
            self._work.put(None)
        for thread in self._threads:
            thread.join(timeout)
        for stream in list(self._streams.values()):
            stream.end()
        for stream in list(self._streams.values()):
            stream.thread.join(timeout)
            stream.kill()

    def _manage(self) -> None:
        backoff = Backoff()
        while not self._stopping.is_set():
            try:
                addresses = locate(self.nodes, self.topic, self.group, self.token, credentials=self.credentials)
                backoff.answered()
            except SubscriberError as exc:
                self._fail(exc)
                return
            except NodesUnreachable as exc:
                self._stopping.wait(backoff.unreachable(exc))
                continue
            self._open(addresses, lambda address: _Stream(self, address))
            self._wake.wait(self.relocate_every)
            self._wake.clear()
            # A broken stream is usually a node going away: give the group a moment to move on.
            self._stopping.wait(backoff.seconds)

    def _work_loop(self) -> None:
        while True:
            item = self._work.get()
            if item is None or self._stopping.is_set() and self.error is not None:
                return
            stream, message = item
            if stream.closed:
                continue  # the node has taken it back with the stream and delivers it elsewhere
            try:
                self.handler(message)
            except Exception as exc:  # the handler's failure is the message's nack, never ours
                self._settle(stream, message, exc)
            else:
                self._settle(stream, message, None)
