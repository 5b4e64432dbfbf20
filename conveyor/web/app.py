"""The watch service over HTTP on 127.0.0.1: the dashboard, its JSON API, /metrics and /healthz.

The watcher runs in a thread started with the app and stopped on shutdown (SIGTERM through
uvicorn). The dashboard page carries the latest state inline, so it shows data on first paint
(and in a headless screenshot) before its first refresh.

Every request must name one of the service's own hosts (a page on a DNS name rebound to
127.0.0.1 would otherwise read it from a browser); the page and /api/state also take the token
of ``ops.token`` when one is set. /metrics, /healthz and the batch components' pages stay open to
scrapers, as every component's own /metrics do. The service listens through the edges' guard
(conveyor.edge_guard), with ``ops.connections``' caps and deadlines.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from conveyor.auth import AccessDenied, TokenBook, Unauthenticated
from conveyor.ops.metrics import ops_registry
from conveyor.ops.report import state_json
from conveyor.ops.component_pages import FILE, served_by_watcher
from conveyor.ops.watch import Watcher

PAGE = (Path(__file__).parent / "dashboard.html").read_text()


#: Hosts the service always answers to, whatever ops.hosts adds.
LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
#: Paths open without the token: scrapers and health checks.
OPEN_PATHS = frozenset({"/metrics", "/healthz"})
#: A batch component's last figures (its ``file:`` page), served for Prometheus to scrape, as
#: node_exporter's textfile collector would.
COMPONENT_PAGES = "/components/"


def _inline(data: object) -> str:
    # No "<" at all: "</script>" would end the script element, and "<!--<script>" would make the
    # parser skip past the real end of it (HTML's double-escaped script state).
    return json.dumps(data, separators=(",", ":")).replace("<", "\\u003c").replace(">", "\\u003e")


def host_name(header: str) -> str:
    """The name of a Host header, without its port: ``[::1]:18070`` is ``::1``."""
    if header.startswith("["):
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0] if header.count(":") == 1 else header


def presented_token(authorization: str | None) -> str:
    """The token of ``Bearer <token>``, or the password of ``Basic`` (what a browser's prompt sends)."""
    scheme, _, value = (authorization or "").partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    if scheme.lower() == "basic":
        try:
            return base64.b64decode(value.strip(), validate=True).decode().partition(":")[2]
        except (binascii.Error, UnicodeDecodeError):
            pass
    raise Unauthenticated("the dashboard takes the ops token: Authorization: Bearer <token>, or Basic with the token "
                          "as the password")


def create_app(watcher: Watcher, bind_host: str = "127.0.0.1", registry: CollectorRegistry | None = None) -> FastAPI:
    """``registry``: what /metrics serves (default: the watcher's own metrics)."""
    registry = registry if registry is not None else ops_registry(watcher)
    stop = threading.Event()
    settings = watcher.platform.ops
    hosts = LOCAL_HOSTS | {bind_host, *settings.hosts}
    tokens = TokenBook({"ops": settings.token}) if settings.token else None

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        thread = threading.Thread(target=watcher.run, args=(stop,), name="ops-watcher", daemon=True)
        thread.start()
        yield
        stop.set()
        thread.join(timeout=watcher.interval + 30)
        watcher.close()

    app = FastAPI(title="Conveyor ops", lifespan=lifespan, docs_url=None, redoc_url=None)

    @app.middleware("http")
    async def guard(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        host = request.headers.get("host", "")
        if host_name(host) not in hosts:
            return JSONResponse({"error": "unknown_host", "message": f"this service does not answer to host {host!r}: "
                                 "add the name to ops.hosts in platform.yaml"}, status_code=400)
        path = request.url.path
        if tokens is not None and path not in OPEN_PATHS and not path.startswith(COMPONENT_PAGES):
            try:
                # Off the event loop: an ops.token_scrypt costs a hash per new token (bounded by TokenBook).
                token = presented_token(request.headers.get("authorization"))
                address = request.client.host if request.client else ""
                found = (tokens.name_of(token, address) if tokens.decided(token)
                         else await asyncio.to_thread(tokens.name_of, token, address))
                if found is None:
                    raise Unauthenticated("unknown ops token")
            except AccessDenied as err:
                return JSONResponse(err.body(), status_code=err.status,
                                    headers={"WWW-Authenticate": 'Basic realm="Conveyor ops", charset="UTF-8"'})
        return await call_next(request)

    @app.get("/", response_class=HTMLResponse)
    def dashboard() -> str:
        state = watcher.state
        return PAGE.replace("/*STATE*/null", _inline(state_json(state)) if state else "null")

    @app.get("/api/state")
    def api_state(group: str | None = None, cluster: str | None = None,
                  partitions: str = Query("problems", pattern="^(problems|all)$")) -> JSONResponse:
        state = watcher.state
        if state is None:
            return JSONResponse({"error": "no round finished yet"}, status_code=503)
        return JSONResponse(state_json(state, group, cluster, partitions == "all"))

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.get(COMPONENT_PAGES + "{name}/metrics")
    def component_page(name: str) -> Response:
        url = watcher.components.get(name, "")
        if not served_by_watcher(url):
            return JSONResponse({"error": "unknown_component", "message": f"ops.components has no file: page "
                                 f"named {name!r}"}, status_code=404)
        try:
            return Response(Path(url.removeprefix(FILE)).read_bytes(), media_type=CONTENT_TYPE_LATEST)
        except OSError as err:
            return JSONResponse({"error": "not_written", "message": f"{name}'s figures cannot be read "
                                 f"({type(err).__name__}: {err})"}, status_code=404)

    @app.get("/healthz")
    def healthz() -> JSONResponse:
        healthy, body = watcher.health()
        return JSONResponse(body, status_code=200 if healthy else 503)

    return app
