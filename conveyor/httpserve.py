"""``/metrics`` and ``/healthz`` for services that have no web framework of their own."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest


def serve_metrics(registry: CollectorRegistry, port: int, health: Callable[[], dict[str, Any]],
                  host: str = "127.0.0.1") -> ThreadingHTTPServer:
    """Serve on a daemon thread; ``health()`` gives the /healthz body."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
            if self.path == "/metrics":
                body, kind = generate_latest(registry), CONTENT_TYPE_LATEST
            elif self.path == "/healthz":
                body, kind = orjson.dumps({"status": "ok", **health()}), "application/json"
            else:
                self.send_error(404, "try /metrics or /healthz")
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            return None  # scrapes every few seconds would drown the service's own log

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name=f"http-{port}", daemon=True).start()
    return server


def wait_healthy(url: str, timeout: float, alive: Callable[[], bool] = lambda: True) -> bool:
    """Poll ``url`` (a /healthz) until it answers 200; False after ``timeout`` s or once ``alive()``
    says the process behind it has died."""
    import time

    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and alive():
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    return False
