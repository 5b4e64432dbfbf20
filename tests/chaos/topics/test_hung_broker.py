"""A broker that hangs (SIGSTOP: a stalled disk, a long pause) with its connections open: the
watcher's sampler still sees its cluster, and the leaders that moved away from it.

librdkafka sends a metadata request to a broker whose connection is up, and a hung broker's stays
up: it never answers and never closes. Until librdkafka's own request timeout (60 s by default)
closed it, every round of `conveyor ops watch` asked that broker again and failed, so the watcher
saw nothing of the cluster (no lag, no leader moves) for a minute or more while one broker of three
hung. The test hangs the very broker that answered the sampler's last metadata request.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from confluent_kafka.admin import ConfigResource, ResourceType

from conveyor.config import Platform
from conveyor.ops.sampler import OffsetSampler, SampleError
from conveyor.runtime import processes
from conveyor.runtime.local import LocalPlatform
from tests.conftest import wait_full_isr

pytestmark = pytest.mark.chaos

#: The sampler's round timeout, as `conveyor ops watch` gives it at a short interval.
TIMEOUT = 5.0


def test_the_sampler_sees_its_cluster_and_the_moved_leaders_while_a_broker_hangs(
        platform: Platform, local: LocalPlatform, topic_factory):
    topic = topic_factory("central", partitions=6)
    sampler = OffsetSampler(platform, "central", timeout=TIMEOUT)
    before = sampler.sample().leaders()
    # librdkafka asks the broker it sent to last (by the second, ties drawn at random): let a
    # round's requests to every broker age, then ask one broker alone and hang it.
    time.sleep(2.5)
    hung = sampler.admin.list_topics(timeout=10).orig_broker_id
    assert any(leader == hung for (name, _), leader in before.items() if name == topic), before
    pid = processes.running_pid(local.node_daemon(local.layout("central").broker(hung)))
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    # A request only the hung broker can answer, left waiting, keeps it the one sent to last.
    sampler.admin.describe_configs([ConfigResource(ResourceType.BROKER, str(hung))], request_timeout=60)
    failures: list[str] = []
    try:
        # The controller fences the hung broker after 4 s without a heartbeat; the sampler has 30 s,
        # half of what librdkafka's request timeout kept every round failing, to see the moves.
        deadline = time.monotonic() + 30
        moved = None
        while time.monotonic() < deadline:
            try:
                now = sampler.sample().leaders()
            except SampleError as err:
                failures.append(str(err))
                continue
            if all(leader != hung for (name, _), leader in now.items() if name == topic):
                moved = now
                break
            time.sleep(0.5)
    finally:
        os.kill(pid, signal.SIGCONT)
    # The fault happened: the broker the sampler was talking to hung, and a round waited on it.
    assert failures, "no round of the sampler waited on the hung broker"
    assert moved is not None, (f"the sampler saw no leader move away from broker {hung} in 30 s while it hung; "
                               f"{len(failures)} rounds failed: {failures[-1]}")
    assert sum(1 for tp, leader in before.items() if tp[0] == topic and leader == hung) == sum(
        1 for tp, leader in moved.items() if tp[0] == topic and before[tp] != leader)
    # Back in every ISR of the topic before the next test uses the cluster.
    wait_full_isr(platform, topic)
