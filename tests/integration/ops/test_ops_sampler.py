"""The offset sampler against real brokers while leaders move: a sample taken right after every
partition of a topic changed leader still has each partition's end and start offsets; and a
sampler process that dies mid-round (librdkafka's abort) is replaced and the round answered."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from conveyor import kafka
from conveyor.config import Platform
from conveyor.ops.balance.live import read_metadata
from conveyor.ops.sampler import SamplerProcess
from tests.balancekit import reassign_and_wait
from tests.conftest import eventually

pytestmark = pytest.mark.integration


def test_a_sample_right_after_the_leaders_moved_still_has_every_partition(platform: Platform, topic_factory,
                                                                          request) -> None:
    topic = topic_factory("central", partitions=3)
    producer = kafka.producer(platform, "central", "sampler-test")
    for i in range(30):
        producer.produce(topic, value=b"x", partition=i % 3)
    assert producer.flush(30) == 0
    # As the watcher samples: in a child process (a librdkafka crash costs a round, not the test's worker).
    sampler = SamplerProcess(platform, "central", timeout=10)
    request.addfinalizer(sampler.close)
    before = sampler.sample([topic])  # the sampler's client now knows the leaders
    partitions = read_metadata(platform, "central", topics=[topic]).partitions
    assert {tp: before.ends.get(tp) for tp in partitions} == dict.fromkeys(partitions, 10), before.errors
    assert all(len(p.replicas) > 1 for p in partitions.values()), "needs replicas to move leaders to"

    reassign_and_wait(platform, "central", {tp: p.replicas[1:] + p.replicas[:1] for tp, p in partitions.items()})
    after = sampler.sample([topic])
    assert not after.errors
    found = {tp: (after.ends.get(tp), after.log_starts.get(tp)) for tp in partitions}
    assert found == dict.fromkeys(partitions, (10, 0))


def test_a_sampler_process_killed_mid_round_is_replaced_and_the_round_answered(platform: Platform, topic_factory,
                                                                               request) -> None:
    topic = topic_factory("central", partitions=2)
    sampler = SamplerProcess(platform, "central", timeout=10)
    request.addfinalizer(sampler.close)
    killed: list[int] = []

    def strike() -> None:
        # As soon as the child exists: it is still importing and connecting, so the round is under way.
        pid = eventually(lambda: sampler.pid, 30, "the sampler's child process", interval=0.01)
        os.kill(pid, signal.SIGSEGV)  # what librdkafka's abort looks like from outside
        killed.append(pid)

    striker = threading.Thread(target=strike)
    striker.start()
    snapshot = sampler.sample([topic])
    striker.join(30)
    # The fault landed: the child that answered is not the one killed.
    assert killed and sampler.pid is not None and sampler.pid != killed[0], (killed, sampler.pid)
    assert not snapshot.errors
    assert sorted(partition for name, partition in snapshot.ends if name == topic) == [0, 1]
