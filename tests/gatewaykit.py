"""Helpers of the gateway's chaos tests: the gateway in its own process, killed and restarted at
will, and SDK traffic that keeps publishing through it and remembers what it sent and what was
taken. Test modules import them."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from conveyor_sdk.publisher import Publisher
from tests.conftest import demo_event, eventually


class GatewayProcess:
    """``conveyor gateway serve`` in its own process, on a fixed port, restartable."""

    def __init__(self, platform_file: Path, port: int, log: Path, dc: str = "dc1") -> None:
        self.argv = [sys.executable, "-m", "conveyor", "gateway", "serve", "--dc", dc, "--port", str(port),
                     "--platform", str(platform_file)]
        self.url = f"http://127.0.0.1:{port}"
        self.log = log
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT)

        def answers() -> bool:
            assert self.process is not None and self.process.poll() is None, \
                f"gateway exited: {self.log.read_text()[-2000:]}"
            return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200

        eventually(answers, 60, f"the gateway to answer on {self.url}", errors=(httpx.HTTPError,))

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(60)


def numbered_events(n: int, size: int) -> list[dict[str, Any]]:
    """Batch ``n // size`` of demo events, each with a user of its own."""
    return [demo_event(user_id=f"user-{n + i}") for i in range(size)]


class Traffic:
    """SDK batches until stopped: every event sent, and those of the batches the gateway took.
    ``batch(n, size)``: the events of the batch that starts at the ``n``-th event."""

    def __init__(self, url: str, topic: str, batch: Callable[[int, int], list[dict[str, Any]]] = numbered_events,
                 size: int = 50) -> None:
        self.url, self.topic, self.batch, self.size = url, topic, batch, size
        self.sent: list[dict[str, Any]] = []
        self.acked: list[str] = []
        self.failure: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def in_flight(self) -> bool:
        """A batch is sent and not yet taken (the SDK may be retrying it)."""
        return len(self.sent) > len(self.acked)

    def _run(self) -> None:
        try:
            with Publisher(self.url, "demo-adserver-token", batch_size=self.size, max_attempts=60, backoff=0.05,
                           max_backoff=1.0, timeout=30) as publisher:
                while not self._stop.is_set():
                    events = self.batch(len(self.sent), self.size)
                    self.sent.extend(events)
                    publisher.publish(self.topic, events)
                    self.acked.extend(e["event_id"] for e in events)
        except BaseException as failure:  # surfaced by the test thread
            self.failure = failure

    def __enter__(self) -> Traffic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(120)
        assert not self._thread.is_alive(), "the SDK's last batch never completed"
