"""A request's body, read as it streams in, within a size and a time."""

from __future__ import annotations

import asyncio

from starlette.requests import ClientDisconnect, Request
from starlette.types import Receive

from conveyor.gateway.errors import RequestTimeout, TooLarge


async def read_body(receive: Receive, content_length: str | None, limit: int, timeout: float) -> bytes:
    """The body as it streams in through ASGI's ``receive``, refused with 413 as soon as it passes
    ``limit``: a chunked request has no Content-Length to check up front, and must not be held in
    memory whole first. A body still incomplete after ``timeout`` seconds is refused with 408; a
    client that goes away raises Starlette's ClientDisconnect."""
    if content_length is not None and content_length.isdigit() and int(content_length) > limit:
        raise TooLarge(f"request of {content_length} bytes is above the limit of {limit} bytes", limit=limit)
    chunks, size = [], 0
    try:
        async with asyncio.timeout(timeout):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise ClientDisconnect()
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > limit:
                    raise TooLarge(f"request of more than {limit} bytes is above the limit", limit=limit)
                chunks.append(chunk)
                if not message.get("more_body", False):
                    break
    except TimeoutError:
        raise RequestTimeout(f"the request's body did not arrive within {timeout:g} s ({size} bytes came)",
                             limit=timeout) from None
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def request_body(request: Request, limit: int, timeout: float) -> bytes:
    """:func:`read_body` of a FastAPI route's request."""
    return await read_body(request.receive, request.headers.get("content-length"), limit, timeout)
