"""The watch service over HTTP on 127.0.0.1: the dashboard, its JSON API, /metrics and /healthz.

The watcher runs in a thread started with the app and stopped on shutdown (SIGTERM through
uvicorn). The dashboard page carries the latest state inline, so it shows data on first paint
(and in a headless screenshot) before its first refresh.
"""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Query
from fastapi.responses import HTMLResponse, JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from conveyor.ops.metrics import ops_registry
from conveyor.ops.report import state_json
from conveyor.ops.watch import Watcher, now_ms

PAGE = (Path(__file__).parent / "dashboard.html").read_text()


def _inline(data: object) -> str:
    # "</" inside a string would end the script element early.
    return json.dumps(data, separators=(",", ":")).replace("</", "<\\/")


def create_app(watcher: Watcher) -> FastAPI:
    registry = ops_registry(watcher)
    stop = threading.Event()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        thread = threading.Thread(target=watcher.run, args=(stop,), name="ops-watcher", daemon=True)
        thread.start()
        yield
        stop.set()
        thread.join(timeout=watcher.interval + 30)
        watcher.close()

    app = FastAPI(title="Conveyor ops", lifespan=lifespan, docs_url=None, redoc_url=None)

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

    @app.get("/healthz")
    def healthz() -> JSONResponse:
        state = watcher.state
        if state is None:
            return JSONResponse({"status": "starting", "rounds": watcher.cycles}, status_code=503)
        age = (now_ms() - state.at_ms) / 1000
        # Three missed rounds (plus a slow round's slack) means the watcher is stuck.
        healthy = age < 3 * watcher.interval + 30
        return JSONResponse({"status": "ok" if healthy else "stale", "rounds": watcher.cycles,
                             "age_seconds": round(age, 1)}, status_code=200 if healthy else 503)

    return app
