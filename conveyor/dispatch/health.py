"""``/metrics`` (Prometheus) and ``/healthz`` of a dispatcher node, on a small HTTP server."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest


def serve_http(host: str, port: int, registry: CollectorRegistry,
               health: Callable[[], tuple[bool, dict[str, Any]]]) -> ThreadingHTTPServer:
    """Start serving in a daemon thread; ``health`` says whether the node is healthy, and why."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path == "/metrics":
                self._send(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif self.path == "/healthz":
                ok, body = health()
                self._send(200 if ok else 503, json.dumps(body).encode(), "application/json")
            else:
                self._send(404, b'{"error": "not found: try /metrics or /healthz"}', "application/json")

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # scrapes are not notable events
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="dispatch-http", daemon=True).start()
    return server
