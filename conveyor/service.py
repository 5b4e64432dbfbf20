"""One way to run a long-lived service: start it, serve its ``/metrics`` and ``/healthz``, stop it
on SIGTERM or SIGINT, and one logging setup for all of them.

Modelled on Burrow's module protocol (configure, start, stop): a service is built configured,
:meth:`Service.run` is its start and blocks, :meth:`Service.stop` asks it to return after it has
finished what it acknowledged (transactions committed, acks written, groups left). Every one runs
through :func:`serve`: the replicator's workers, the dispatcher, the lake's scheduler, the
real-time views, the throttle, and the gateway and the watch service, whose apps uvicorn serves
behind the edges' guard (conveyor.edge_guard.ServedEdge) and which answer /metrics and /healthz
themselves.
"""

from __future__ import annotations

import ssl

import logging
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal, Protocol

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from pythonjsonlogger.json import JsonFormatter

log = logging.getLogger(__name__)

#: Whether the service is healthy, and the /healthz body that says why.
Health = Callable[[], tuple[bool, dict[str, Any]]]
LogFormat = Literal["text", "json"]
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class Service(Protocol):
    #: Metric families of the service, served on /metrics.
    registry: CollectorRegistry

    def run(self) -> int:
        """Work until :meth:`stop` is called or the work fails; the process's exit status."""

    def stop(self) -> None:
        """Ask :meth:`run` to return. Called from a signal handler: it only sets a flag."""

    def health(self) -> tuple[bool, dict[str, Any]]: ...


class Loop:
    """A service made of a function that works until the event it is given is set."""

    def __init__(self, registry: CollectorRegistry, work: Callable[[threading.Event], int],
                 health: Health = lambda: (True, {})) -> None:
        self.registry = registry
        self._work = work
        self._health = health
        self._stop = threading.Event()

    def run(self) -> int:
        return self._work(self._stop)

    def stop(self) -> None:
        self._stop.set()

    def health(self) -> tuple[bool, dict[str, Any]]:
        return self._health()


@dataclass(frozen=True)
class Endpoint:
    """Where /metrics and /healthz listen; no port, no server. A host other than loopback makes
    them reachable by a Prometheus on another machine."""

    host: str = "127.0.0.1"
    port: int | None = None


class MetricsServer:
    """/metrics and /healthz on a small threaded HTTP server (port 0: one the OS picks)."""

    def __init__(self, registry: CollectorRegistry, health: Health, endpoint: Endpoint) -> None:
        assert endpoint.port is not None
        handler = _handler(registry, health)
        self._server = ThreadingHTTPServer((endpoint.host, endpoint.port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name=f"http-{self.port}", daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler(registry: CollectorRegistry, health: Health) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path == "/metrics":
                self._send(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif self.path == "/healthz":
                ok, body = health()
                self._send(200 if ok else 503, orjson.dumps({"status": "ok" if ok else "failing", **body}),
                           "application/json")
            else:
                self._send(404, b'{"error": "not found: try /metrics or /healthz"}', "application/json")

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            return None  # scrapes every few seconds would drown the service's own log

    return Handler


def stop_on_signals(stop: Callable[[], None]) -> None:
    """SIGTERM and SIGINT call ``stop`` once each; a second signal does not kill the stop under way
    (acknowledged data is being committed), it is only logged."""
    def handle(signum: int, _frame: object) -> None:
        log.info("%s: stopping", signal.Signals(signum).name)
        stop()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, handle)


def serve(service: Service, endpoint: Endpoint = Endpoint()) -> int:
    """Run ``service`` in the foreground until a signal stops it; its exit status."""
    stop_on_signals(service.stop)
    server = MetricsServer(service.registry, service.health, endpoint) if endpoint.port is not None else None
    try:
        return service.run()
    finally:
        if server is not None:
            server.close()


class _StderrHandler(logging.StreamHandler):
    """Writes to ``sys.stderr`` as it is at each record, not as it was at set-up: a command run
    in-process (Typer's test runner, a test's capture) swaps stderr and closes its copy, after
    which a handler holding it failed every record with "I/O operation on closed file"."""

    @property  # type: ignore[override]
    def stream(self):  # noqa: ANN201 (StreamHandler's attribute)
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:  # noqa: ANN001 (StreamHandler.__init__ assigns it)
        pass


def setup_logging(level: str | None = None, fmt: LogFormat = "text") -> None:
    """Every command's logging, to stderr as text lines or one JSON object per line. Without a
    level, Conveyor's own loggers say INFO and libraries (httpx's every request, py4j's
    connections) only WARNING and above."""
    handler = _StderrHandler()
    if fmt == "json":
        handler.setFormatter(JsonFormatter("%(asctime)s %(levelname)s %(name)s %(message)s",
                                           rename_fields={"levelname": "level", "name": "logger"}))
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel((level or "WARNING").upper())
    logging.getLogger("conveyor").setLevel(logging.NOTSET if level else logging.INFO)
    # librdkafka's own lines (conveyor.kafka_logs) are a library's: its INFO is connection chatter.
    logging.getLogger("conveyor.librdkafka").setLevel(logging.NOTSET if level else logging.WARNING)


def wait_healthy(url: str, timeout: float, alive: Callable[[], bool] = lambda: True,
                 verify: ssl.SSLContext | str | bool = True) -> bool:
    """Poll ``url`` (a /healthz) until it answers 200; False after ``timeout`` s or once ``alive()``
    says the process behind it has died. ``verify``: httpx's, for an HTTPS ``url``."""
    import time

    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and alive():
        try:
            if httpx.get(url, timeout=2, verify=verify).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    return False
