"""A request's body, read as it streams in, within a size and a time."""

from __future__ import annotations

import asyncio

from fastapi import Request

from conveyor.gateway.errors import RequestTimeout, TooLarge


async def read_body(request: Request, limit: int, timeout: float) -> bytes:
    """The body as it streams in, refused with 413 as soon as it passes ``limit``: a chunked request
    has no Content-Length to check up front, and must not be held in memory whole first. A body
    still incomplete after ``timeout`` seconds is refused with 408."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise TooLarge(f"request of {length} bytes is above the limit of {limit} bytes", limit=limit)
    chunks, size = [], 0
    try:
        async with asyncio.timeout(timeout):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise TooLarge(f"request of more than {limit} bytes is above the limit", limit=limit)
                chunks.append(chunk)
    except TimeoutError:
        raise RequestTimeout(f"the request's body did not arrive within {timeout:g} s ({size} bytes came)",
                             limit=timeout) from None
    return b"".join(chunks)
