"""The frames a client sends on a Read stream: read on a thread of the stream's own from its start,
since gRPC's request iterator blocks with no timeout, and a stream must subscribe within
``dispatch.subscribe_timeout`` (``first`` waits for that long) or give its slot back. Checking a
frame (``invalid``) is pure.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

import grpc

from conveyor.dispatch.fanout import Client
from conveyor_sdk.protos import dispatch_pb2 as pb
from conveyor.dispatch.source import Source


class FirstFrameTimeout(Exception):
    """No frame came within the time allowed."""


class Inbound:
    """Reads a stream's frames: the first is handed to the server (``first``), the others go to
    the reader the server connects the client to (``serve``) until the stream ends or sends a bad
    frame (``problem``). ``abandon`` lets the thread go when the server ends the stream before
    serving it; gRPC ends the thread's wait for a frame once the stream is closed."""

    def __init__(self, requests: Iterator[pb.ReadRequest], max_retry_delay_ms: int, name: str) -> None:
        self._requests = requests
        self._max_retry_delay_ms = max_retry_delay_ms
        self._first: queue.SimpleQueue[pb.ReadRequest | None] = queue.SimpleQueue()
        self._target: queue.SimpleQueue[tuple[Source, Client] | None] = queue.SimpleQueue()
        self.problem: str | None = None
        threading.Thread(target=self._run, name=name, daemon=True).start()

    def first(self, timeout: float) -> pb.ReadRequest | None:
        """The first frame, or None if the client closed its side without one; raises
        FirstFrameTimeout if none came within ``timeout`` seconds."""
        try:
            return self._first.get(timeout=timeout)
        except queue.Empty:
            raise FirstFrameTimeout from None

    def serve(self, reader: Source, client: Client) -> None:
        self._target.put((reader, client))

    def abandon(self) -> None:
        self._target.put(None)

    def _run(self) -> None:
        try:
            first = next(self._requests, None)
        except grpc.RpcError:
            first = None  # the client went away first
        self._first.put(first)
        if first is None:
            return
        target = self._target.get()
        if target is None:
            return
        reader, client = target
        try:
            for request in self._requests:
                why = invalid(request, self._max_retry_delay_ms)
                if why is not None:
                    self.problem = why
                    return
                reader.handle(client, request)
        except grpc.RpcError:
            pass  # the client went away: what it held goes to the others
        finally:
            reader.disconnect(client)
            client.outbox.put(None)


def invalid(request: pb.ReadRequest, max_retry_delay_ms: int) -> str | None:
    """Why a frame after the first is refused, or None."""
    if request.HasField("subscribe"):
        return "a stream subscribes once, in its first frame"
    for ids in (request.acks, *(n.ids for n in request.nacks)):
        if len(ids.partitions) != len(ids.offsets):
            return f"ids have {len(ids.partitions)} partitions but {len(ids.offsets)} offsets"
    for index, nack in enumerate(request.nacks):
        if nack.retry_delay_ms > max_retry_delay_ms:
            return (f"nacks[{index}].retry_delay_ms is {nack.retry_delay_ms} ms, above the node's limit of "
                    f"{max_retry_delay_ms} ms (dispatch.max_retry_delay)")
    return None
