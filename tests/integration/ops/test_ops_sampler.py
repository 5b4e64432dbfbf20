"""The offset sampler against real brokers while leaders move: a sample taken right after every
partition of a topic changed leader still has each partition's end and start offsets."""

from __future__ import annotations

import pytest

from conveyor import kafka
from conveyor.config import Platform
from conveyor.ops.balance.live import read_metadata
from conveyor.ops.sampler import SamplerProcess
from tests.balancekit import reassign_and_wait

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
