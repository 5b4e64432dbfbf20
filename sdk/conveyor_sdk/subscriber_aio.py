"""The asyncio flavour of the subscriber: ``AsyncSubscriber(topic, group, handler, concurrency)``
with an ``async def`` handler, on grpc.aio. Same behaviour as ``conveyor_sdk.subscriber.Subscriber``:
a return acks, a raise nacks (``Retry(delay)`` for a later redelivery), streams reopen, nodes are
located again every ``relocate_every`` seconds."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from grpc import aio

from conveyor_sdk.subscriber import (Backoff, Message, NodesUnreachable, StreamBase, SubscriberBase, SubscriberError,
                                      auth_metadata, locate, subscribe_frame)
from conveyor_sdk.protos import dispatch_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)


class _Stream(StreamBase):
    def __init__(self, sub: AsyncSubscriber, address: str) -> None:
        super().__init__(sub, address)
        self._pending = asyncio.Event()
        self._channel = (aio.insecure_channel(address) if sub.credentials is None
                         else aio.secure_channel(address, sub.credentials))
        self.task = asyncio.create_task(self._run(), name=f"stream-{address}")

    def _post(self, change: Callable[[], None]) -> None:
        change()  # one event loop: nothing runs between the change and the wake-up
        self._pending.set()

    async def end(self) -> None:
        """Send what is pending, close our side, and let the node end the stream."""
        self.closed = True
        self._pending.set()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.task), 30)
        await self._channel.close()

    async def _send(self, call: aio.StreamStreamCall) -> None:
        while True:
            await self._pending.wait()
            self._pending.clear()
            if self._out:
                await call.write(self._out.take())
            if self.closed:
                await call.done_writing()
                return

    async def _run(self) -> None:
        sub = self._sub
        call = pb_grpc.ReaderStub(self._channel).Read(metadata=auth_metadata(sub.token))
        sender: asyncio.Task[None] | None = None
        try:
            await call.write(subscribe_frame(sub.topic, sub.group, sub.credit))
            sender = asyncio.create_task(self._send(call))
            async for frame in call:
                self._deliver(frame)
        except aio.AioRpcError as exc:
            sub._stream_failed(exc, self.address, self.closed)
        finally:
            self.closed = True
            if sender is not None:
                sender.cancel()
            sub._wake.set()


class AsyncSubscriber(SubscriberBase):
    """Use as ``async with AsyncSubscriber(...)``, or ``await start()`` and ``await stop()``."""

    def __init__(self, topic: str, group: str, handler: Callable[[Message], Awaitable[object]],
                 concurrency: int = 1, **options: Any) -> None:
        super().__init__(topic, group, handler, concurrency, **options)
        self._work: asyncio.Queue[tuple[_Stream, Message]] = asyncio.Queue()
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        # Workers inside the handler: stop() lets them finish instead of cancelling them.
        self._busy: set[asyncio.Task[Any] | None] = set()

    async def __aenter__(self) -> AsyncSubscriber:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.stop()

    async def start(self) -> None:
        self._tasks = [asyncio.create_task(self._work_loop()) for _ in range(self.concurrency)]
        self._tasks.append(asyncio.create_task(self._manage()))

    async def stop(self) -> None:
        """Finish the messages being handled, send their acks, and close the streams."""
        self._wake_to_stop()
        for task in self._tasks:
            if task not in self._busy:
                task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.gather(*(stream.end() for stream in self._streams.values()))

    async def _manage(self) -> None:
        backoff = Backoff()
        while not self._stopping.is_set():
            try:
                # Discovery is one short unary call: a thread keeps one implementation of it.
                addresses = await asyncio.to_thread(locate, self.nodes, self.topic, self.group, self.token,
                                                    credentials=self.credentials)
                backoff.answered()
            except SubscriberError as exc:
                self._fail(exc)
                return
            except NodesUnreachable as exc:
                await asyncio.sleep(backoff.unreachable(exc))
                continue
            self._open(addresses, lambda address: _Stream(self, address))
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.relocate_every)
            self._wake.clear()
            await asyncio.sleep(backoff.seconds)

    async def _work_loop(self) -> None:
        me = asyncio.current_task()
        while not self._stopping.is_set():
            stream, message = await self._work.get()
            if stream.closed:
                continue  # taken back with the stream; the node delivers it elsewhere
            self._busy.add(me)
            try:
                await self.handler(message)
            except Exception as exc:  # the handler's failure is the message's nack, never ours
                self._settle(stream, message, exc)
            else:
                self._settle(stream, message, None)
            finally:
                self._busy.discard(me)
