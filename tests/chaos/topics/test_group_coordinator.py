"""A group's coordinator lost for longer than a request to it waits, then back: the process that
asked lives on and is answered.

librdkafka looks a group's coordinator up without a timeout of its own. When a request to the
coordinator timed out during the lookup and the coordinator was found after, librdkafka sent it
anyway and aborted the whole process (librdkafka #4605, open in the 2.x line): a service asking
about groups through a broker's loss died once the broker came back. The client runs in a process
of its own here, as a service would, so that an abort shows as its exit.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from conveyor.runtime.local import LocalPlatform

pytestmark = pytest.mark.chaos

#: Asks about a group on dc1 while its only broker is down, waits for a line on stdin (the broker
#: is back), then asks again and lingers while librdkafka's earlier lookups find the coordinator.
_CLIENT = """
import sys, time
from confluent_kafka import KafkaException
from conveyor import kafka
from conveyor.config import load_resolved_platform

platform, group = load_resolved_platform(sys.argv[1]), sys.argv[2]
admin = kafka.admin(platform, "dc1")
try:
    kafka.describe_groups(admin, [group], patience=15)
    print("answered while the coordinator was down", flush=True)
except KafkaException as err:
    print("no answer while down:", err.args[0].str(), flush=True)
sys.stdin.readline()
print("described:", kafka.describe_groups(admin, [group], patience=120)[group].group_id, flush=True)
time.sleep(5)
print("alive", flush=True)
"""


def test_a_group_s_coordinator_back_after_its_requests_timed_out_leaves_the_asking_process_alive(
        local: LocalPlatform, platform_file: Path):
    group = f"coordinator-{uuid.uuid4().hex[:8]}"
    (broker,) = [node.node_id for node in local.layout("dc1").brokers]
    killed = local.kill_broker("dc1", broker)
    client = subprocess.Popen([sys.executable, "-c", _CLIENT, str(platform_file), group], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert killed is not None, "dc1's broker was not running"
        down = client.stdout.readline()
    finally:
        local.start_brokers("dc1", broker)
    try:
        client.stdin.write("back\n")
        client.stdin.flush()
        out, err = client.communicate(timeout=240)
    finally:
        client.kill()
    # The fault: every request asked while the broker was down timed out unanswered.
    assert down.startswith("no answer while down:"), (down, err[-2000:])
    assert client.returncode == 0, f"the client exited {client.returncode}: {out!r} {err[-2000:]}"
    assert f"described: {group}" in out and "alive" in out, (out, err[-2000:])
