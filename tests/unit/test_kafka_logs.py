"""librdkafka's log lines go through Python logging, never straight to a command's output: a CLI
run against a cluster that refuses connections printed some 1,100 ``%3|...|FAIL|`` lines a minute
before (and the demo's smoke step ``%4|...|GETPID|`` lines)."""

from __future__ import annotations

import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conveyor import kafka
from conveyor.config import parse_platform
from conveyor.kafka_logs import level_of

ROOT = Path(__file__).resolve().parents[2]
LIBRDKAFKA_LINE = re.compile(r"^%\d\|", re.MULTILINE)


@pytest.mark.parametrize(("level", "facility", "text", "expected"), [
    (logging.ERROR, "FAIL", "127.0.0.1:9/bootstrap: Connect to ipv4#127.0.0.1:9 failed: Connection refused",
     logging.INFO),
    (logging.ERROR, "FAIL", "central-broker-2: Disconnected (after 51234ms in state UP)", logging.INFO),
    (logging.WARNING, "GETPID", "Failed to acquire idempotence PID from broker 127.0.0.1:19092/1: Broker: "
                                "Coordinator load in progress: retrying", logging.INFO),
    (logging.WARNING, "GETPID", "Failed to acquire idempotence PID: Broker: Cluster authorization failed",
     logging.WARNING),
    (logging.WARNING, "CONFWARN", "Configuration property batch.size is a producer property and will be ignored",
     logging.WARNING),
    (logging.DEBUG, "FAIL", "anything", logging.DEBUG),
])
def test_transient_lines_that_the_client_retries_by_itself_are_info(level, facility, text, expected):
    assert level_of(level, facility, text) == expected


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # closed again when the probe is: connecting is refused


def refusing_platform(folder: Path) -> Path:
    """The demo platform with every cluster at an address that refuses connections."""
    data = yaml.safe_load((ROOT / "platform.yaml").read_text())
    port = closed_port()
    data["clusters"] = {name: {"role": spec["role"], "bootstrap": f"127.0.0.1:{port}"}
                        for name, spec in data["clusters"].items()}
    for spec in data["topics"].values():
        if spec.get("contract"):
            spec["contract"] = str(ROOT / spec["contract"])
    path = folder / "platform.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_a_cli_run_prints_no_librdkafka_line(tmp_path):
    # `conveyor smoke` creates its admin client at once; librdkafka printed its first refused
    # connection within 0.1 s of that, and a line every 50 ms after.
    path = refusing_platform(tmp_path)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    child = subprocess.Popen([sys.executable, "-m", "conveyor", "smoke", "--messages", "1", "--platform", str(path)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path)
    time.sleep(12)  # imports take seconds on a busy machine; then the admin client keeps trying
    child.send_signal(signal.SIGINT)
    output, _ = child.communicate(timeout=60)
    assert not LIBRDKAFKA_LINE.search(output), output[:2000]


def test_a_polled_clients_lines_arrive_as_log_records(tmp_path, caplog):
    platform = parse_platform(yaml.safe_load(refusing_platform(tmp_path).read_text()), root=tmp_path)
    producer = kafka.producer(platform, "dc1", "log-test", {"socket.connection.setup.timeout.ms": 1000})
    producer.produce("anything", b"x")
    with caplog.at_level(logging.DEBUG, logger="conveyor.librdkafka"):
        deadline = time.monotonic() + 10
        while not caplog.records and time.monotonic() < deadline:
            producer.poll(0.2)
    refused = [r for r in caplog.records if r.name == "conveyor.librdkafka" and "Connection refused" in r.getMessage()]
    assert refused and {r.levelno for r in refused} == {logging.INFO}
    assert "FAIL [log-test#producer-" in refused[0].getMessage()
    producer.purge()
