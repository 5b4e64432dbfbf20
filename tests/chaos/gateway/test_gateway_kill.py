"""The gateway SIGKILLed under SDK traffic: it is killed at random moments (seeded) and started
again on the same port while a Publisher keeps sending. Every event the gateway answered 2xx for is
on Kafka, every batch is accepted in the end through the SDK's retries, and the lake, with
de-duplication on, holds every event the SDK sent exactly once (a retried batch whose first answer
was lost to a kill is written twice; its event ids are the same).

CONVEYOR_GATEWAY_CHAOS_KILLS sets the number of kills (default 2); CONVEYOR_CHAOS_SEED the seed.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from conveyor.config import Platform
from conveyor_sdk.publisher import Publisher
from conveyor.pipeline.lake import run_once
from tests.conftest import demo_event, eventually, read_topic
from tests.lakekit import GatewayLakeCase, drop_topics, gateway_lake_case, lake_folder, lake_spark, rows_of  # noqa: F401

pytestmark = pytest.mark.chaos

KILLS = int(os.environ.get("CONVEYOR_GATEWAY_CHAOS_KILLS", "2"))
SEED = int(os.environ.get("CONVEYOR_CHAOS_SEED", random.randrange(1 << 32)))


class GatewayProcess:
    """``conveyor gateway serve`` in its own process, on a fixed port, restartable."""

    def __init__(self, case: GatewayLakeCase, port: int, log: Path) -> None:
        self.argv = [sys.executable, "-m", "conveyor", "gateway", "serve", "--dc", "dc1", "--port", str(port),
                     "--platform", str(case.path)]
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


class Traffic:
    """SDK batches until stopped: every event sent, and the ids of batches the gateway took."""

    def __init__(self, url: str, topic: str) -> None:
        self.url, self.topic = url, topic
        self.sent: list[str] = []
        self.acked: list[str] = []
        self.failure: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        n = 0
        try:
            with Publisher(self.url, "demo-adserver-token", batch_size=50, max_attempts=60, backoff=0.05,
                           max_backoff=1.0, timeout=30) as publisher:
                while not self._stop.is_set():
                    batch = [demo_event(user_id=f"user-{n + i}") for i in range(50)]
                    self.sent.extend(e["event_id"] for e in batch)
                    publisher.publish(self.topic, batch)
                    self.acked.extend(e["event_id"] for e in batch)
                    n += len(batch)
        except BaseException as failure:  # surfaced by the test thread
            self.failure = failure

    def __enter__(self) -> Traffic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(120)
        assert not self._thread.is_alive(), "the SDK's last batch never completed"


@pytest.fixture
def case(provisioned: Platform, platform_data: dict[str, Any], lake_folder: Path,  # noqa: F811
         lake_spark: Any) -> Iterator[GatewayLakeCase]:  # noqa: F811
    made = gateway_lake_case(platform_data, lake_folder, ["ad-events"], dedup_window="1h")
    yield made
    drop_topics(made)


def test_killed_gateway_loses_nothing_it_answered_and_the_lake_counts_each_event_once(
        case: GatewayLakeCase, lake_spark: Any, tmp_path: Path) -> None:  # noqa: F811
    rng = random.Random(SEED)
    topic = case.topics["ad-events"]
    gateway = GatewayProcess(case, case.platform.runtime.base_port + 500, tmp_path / "gateway.log")
    gateway.start()
    try:
        with Traffic(gateway.url, topic) as traffic:
            for _ in range(KILLS):
                time.sleep(rng.uniform(0.3, 2.5))
                gateway.kill()
                time.sleep(rng.uniform(0.0, 1.0))
                gateway.start()
            time.sleep(1.0)
        note = f"seed {SEED} (rerun with CONVEYOR_CHAOS_SEED={SEED}); gateway log {gateway.log}"
        assert traffic.failure is None, f"the SDK gave up: {traffic.failure!r}; {note}"
        written = [orjson.loads(m.value())["event_id"] for m in read_topic(case.platform, "dc1", topic)]
        on_kafka = set(written)
        print(f"gateway chaos: {KILLS} kills, {len(traffic.sent)} events sent, {len(written) - len(on_kafka)} "
              f"written twice by retries; {note}")
        missing = set(traffic.acked) - on_kafka
        assert not missing, f"{len(missing)} events answered 2xx are not on Kafka; {note}"
    finally:
        gateway.stop()

    run_once(lake_spark, case.platform, [topic])
    landed = [row["event_id"] for row in rows_of(lake_spark, topic)]
    assert len(landed) == len(set(landed)), f"the lake holds duplicates; {note}"
    assert set(landed) == set(traffic.sent), (
        f"lake: {len(set(landed) - set(traffic.sent))} unexpected, {len(set(traffic.sent) - set(landed))} missing "
        f"of {len(traffic.sent)} sent; {note}")
