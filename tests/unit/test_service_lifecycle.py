"""conveyor.service: the one lifecycle every long-running command runs through."""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter

from conveyor.service import Endpoint, Loop, MetricsServer, serve, setup_logging


@pytest.fixture
def restore_signals() -> Iterator[None]:
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def _registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    Counter("conveyor_test_things", "things", registry=registry).inc(3)
    return registry


def test_metrics_and_health_are_served_and_a_failing_service_answers_503() -> None:
    healthy = {"ok": True}
    server = MetricsServer(_registry(), lambda: (healthy["ok"], {"route": "r1"}), Endpoint(port=0))
    base = f"http://127.0.0.1:{server.port}"
    try:
        assert "conveyor_test_things_total 3.0" in httpx.get(f"{base}/metrics").text
        ok = httpx.get(f"{base}/healthz")
        assert (ok.status_code, ok.json()) == (200, {"status": "ok", "route": "r1"})
        healthy["ok"] = False
        failing = httpx.get(f"{base}/healthz")
        assert (failing.status_code, failing.json()["status"]) == (503, "failing")
        missing = httpx.get(f"{base}/nothing")
        assert missing.status_code == 404 and "error" in missing.json()
    finally:
        server.close()


def test_sigterm_stops_the_work_which_returns_its_status_and_the_server_closes(restore_signals: None) -> None:
    finished_work = threading.Event()

    def work(stop: threading.Event) -> int:
        os.kill(os.getpid(), signal.SIGTERM)  # as a supervisor stops a service
        assert stop.wait(10), "SIGTERM did not reach the service's stop"
        finished_work.set()  # acknowledged work is finished after the signal, not cut short
        return 3

    assert serve(Loop(_registry(), work), Endpoint(port=0)) == 3
    assert finished_work.is_set()


def test_the_server_is_gone_after_serve_returns(restore_signals: None) -> None:
    seen: dict[str, int] = {}

    def work(stop: threading.Event) -> int:
        return 0

    original = MetricsServer.__init__

    def remember(self: MetricsServer, *args: object) -> None:
        original(self, *args)  # type: ignore[arg-type]
        seen["port"] = self.port

    MetricsServer.__init__ = remember  # type: ignore[method-assign]
    try:
        serve(Loop(_registry(), work), Endpoint(port=0))
    finally:
        MetricsServer.__init__ = original  # type: ignore[method-assign]
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{seen['port']}/healthz", timeout=2)


def test_json_logs_are_one_object_per_line_with_level_and_logger(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = io.StringIO()
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        setup_logging(None, "json")
        # stderr swapped after set-up (as a CLI test runner does): the logs follow it.
        monkeypatch.setattr(sys, "stderr", stream)
        logging.getLogger("conveyor.replicate").info("bucket %d started", 4)
        logging.getLogger("httpx").info("a library's chatter stays out at the default level")
        lines = stream.getvalue().splitlines()
        assert len(lines) == 1
        record = json.loads(lines[0])
        assert (record["level"], record["logger"], record["message"]) == ("INFO", "conveyor.replicate", "bucket 4 started")
    finally:
        root.handlers[:], _ = saved[0], root.setLevel(saved[1])
        logging.getLogger("conveyor").setLevel(logging.NOTSET)
