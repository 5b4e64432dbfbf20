"""The gateway's HTTP server: uvicorn's httptools protocol with bounds on a request's head.

uvicorn bounds neither the number nor the size of a request's headers, nor the time they take
(its keep-alive timeout only starts after an answer), and a sender could hold a connection and
memory without end. The bounds are kept here, where each header arrives, so nothing past them is
held: too many or too large headers get 431, a request line and headers that do not arrive within
``header_timeout`` get 408, each with the gateway's JSON error body, and the connection closes.
The body's deadline is the app's (conveyor.gateway.app), which counts it in its metrics.

The gateway listens through the edges' guard (conveyor.edge_guard): caps on its connections, a
deadline for each TLS handshake, and one for the first request, which, when its head has not all
arrived in time, is answered 408 here as a late head is.
"""

from __future__ import annotations

import asyncio
from functools import partial
from http import HTTPStatus
from typing import Any

import orjson
import uvicorn

from prometheus_client import CollectorRegistry

from conveyor.config.gateway import Gateway as GatewaySettings
from conveyor.edge_guard import EdgeGuard, GuardedHttp, GuardedServer
from conveyor.errors import Refusal
from conveyor.gateway.errors import HeadersTooLarge, RequestTimeout

#: Seconds a refused connection still reads (and drops) what its client sends before it closes:
#: closing with unread data resets the connection, which can discard the answer before it is read.
LINGER = 1.0


class BoundedHttp(GuardedHttp):
    """One connection; each request's head is bounded by count, bytes and time."""

    def __init__(self, *args: Any, settings: GatewaySettings, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._settings = settings
        self._headers = 0
        self._head_bytes = 0
        self._deadline: asyncio.TimerHandle | None = None
        self._refused = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self._refused:
            super().data_received(data)

    def on_message_begin(self) -> None:
        if self._refused:
            return
        super().on_message_begin()
        self._headers = self._head_bytes = 0
        if self._deadline is None:  # the first request's deadline runs from the connection's start
            self._arm()

    def on_url(self, url: bytes) -> None:
        if self._within(len(url)):
            super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers += 1
        if self._headers > self._settings.max_headers and not self._refused:
            self._refuse(HeadersTooLarge(f"the request has more than {self._settings.max_headers} headers",
                                         limit=self._settings.max_headers))
        if self._within(len(name) + len(value)):
            super().on_header(name, value)

    # The parser reads on to the end of the data it was given; after a refusal nothing reaches the app.
    def on_headers_complete(self) -> None:
        self._disarm()
        if not self._refused:
            super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self._refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if not self._refused:
            super().on_message_complete()

    def _within(self, size: int) -> bool:
        self._head_bytes += size
        limit = self._settings.max_header_bytes
        if self._head_bytes > limit and not self._refused:
            self._refuse(HeadersTooLarge(f"the request line and headers are more than {limit} bytes", limit=limit))
        return not self._refused

    def _arm(self) -> None:
        self._deadline = self.loop.call_later(self._settings.header_timeout, self._head_late)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _head_late(self) -> None:
        self._deadline = None
        if self.cycle is not None and not self.cycle.response_complete:
            # A pipelined request is late behind one being answered: close once that answer is sent.
            self.cycle.keep_alive = False
            return
        self._refuse(RequestTimeout(f"the request line and headers did not arrive within "
                                    f"{self._settings.header_timeout:g} s"))

    def request_late(self) -> None:
        if not self._refused:
            self._refuse(RequestTimeout(f"the first request's line and headers did not arrive within "
                                        f"{self._settings.connections.first_request_timeout:g} s of connecting"))

    def _refuse(self, refusal: Refusal) -> None:
        self._refused = True
        self._disarm()
        body = orjson.dumps(refusal.body())
        self.transport.write(b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
                             b"connection: close\r\n\r\n%s"
                             % (refusal.status, HTTPStatus(refusal.status).phrase.encode(), len(body), body))
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER, self.transport.close)


def server_config(app: Any, settings: GatewaySettings, host: str, port: int, **options: Any) -> uvicorn.Config:
    """The gateway's uvicorn settings; ``options``: more of uvicorn's (its certificate)."""
    return uvicorn.Config(app, host=host, port=port, http=partial(BoundedHttp, settings=settings),
                          log_level="warning", access_log=False, proxy_headers=False, **options)


def gateway_server(app: Any, settings: GatewaySettings, registry: CollectorRegistry, host: str, port: int,
                   **options: Any) -> GuardedServer:
    """The gateway's server behind its guard, whose refusals ``registry`` (the gateway's /metrics) shows."""
    guard = EdgeGuard("gateway", settings.connections)
    registry.register(guard)
    return GuardedServer(server_config(app, settings, host, port, **options), guard)
