"""``POST /v1/topics/{topic}/events``, the gateway's hot path, served as plain ASGI in front of
the FastAPI app, which serves every other request.

Through FastAPI, a request to this path had every registry route's pattern tried before its own,
its dependencies solved, and Starlette's Request and Response built around it: about 200 us of a
core per request, against under 20 us here (docs/benchmarks.md, the gateway's profile). The path
is matched once, the headers read from the ASGI scope, the body from ``receive``
(conveyor.gateway.bodies), and the answer sent in two messages.
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING

import orjson
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Receive, Scope, Send

from conveyor.errors import Refusal
from conveyor.gateway.bodies import read_body
from conveyor.gateway.errors import refusal_headers
from conveyor.gateway.parsing import media_type

if TYPE_CHECKING:
    from conveyor.gateway.app import Gateway

#: The path's one parameter, as FastAPI's ``{topic}`` would match it.
EVENTS_PATH = re.compile(r"/v1/topics/([^/]+)/events")
_JSON = (b"content-type", b"application/json")


async def _send_json(send: Send, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [_JSON, (b"content-length", str(len(body)).encode()),
                            *((name.lower().encode(), value.encode()) for name, value in (headers or {}).items())]})
    await send({"type": "http.response.body", "body": body})


class EventsFirst:
    """ASGI: the events path served here, anything else passed to ``app``."""

    def __init__(self, app: ASGIApp, gateway: Gateway) -> None:
        self.app = app
        self.gateway = gateway

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = EVENTS_PATH.fullmatch(scope["path"]) if scope["type"] == "http" else None
        if match is None:
            await self.app(scope, receive, send)
        elif scope["method"] != "POST":
            await _send_json(send, 405, b'{"error":"method_not_allowed","message":"Method Not Allowed"}',
                          {"Allow": "POST"})
        else:
            await self.publish(match[1], scope, receive, send)

    async def publish(self, topic: str, scope: Scope, receive: Receive, send: Send) -> None:
        gateway = self.gateway
        started = time.perf_counter()
        label = topic if topic in gateway.platform.topics else "(unknown)"
        headers = {name: value.decode("latin-1") for name, value in scope["headers"]
                   if name in (b"authorization", b"content-type", b"content-length")}
        client = scope.get("client")
        try:
            await gateway.authorize(topic, headers.get(b"authorization"), client[0] if client else "")
            media = media_type(headers.get(b"content-type"))
            body = await read_body(receive, headers.get(b"content-length"), gateway.settings.max_request_bytes,
                                   gateway.settings.body_timeout)
            with gateway.admission():
                answer = await gateway.publish(topic, body, media)
        except Refusal as err:
            gateway.metrics.rejected.labels(label, err.reason).inc()
            await _send_json(send, err.status, orjson.dumps(err.body()), refusal_headers(err))
            return
        except ClientDisconnect:  # gone before its body came: no one to answer, nothing was written
            return
        finally:
            gateway.metrics.latency.labels(label).observe(time.perf_counter() - started)
        await _send_json(send, 200, orjson.dumps(answer))
