"""The replicator under fire: dc1 and dc2 copied into central while workers are SIGKILLed at random
and 20 topics are created mid-run. A read_committed consumer on central must see exactly the
produced events, each once, in per-key order; the at-least-once mode loses nothing; a record too
large stops only its own partition.

CONVEYOR_CHAOS_ROUNDS sets the number of kills (default 10, the issue's minimum). Adding topics
without pausing the others is timed in test_replicate_pause.py; retention gaps are in
test_replicate_gaps.py.
"""

from __future__ import annotations

import copy
import os
import random
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from conveyor import kafka
from conveyor.config import Platform
from conveyor.positions import group_name
from tests.conftest import eventually, platform_variant
from tests.positionkit import end_offsets, monitored
from tests.replicatekit import (
    BASE,
    ROUTES,
    Traffic,
    Workers,
    copies_of,
    create_topic,
    read_records,
    route_platform_file,
    start_route_workers,
    wait_until_copied,
    wait_until_led,
    wait_until_replicated,
)

pytestmark = pytest.mark.chaos
ROUNDS = int(os.environ.get("CONVEYOR_CHAOS_ROUNDS", "10"))
#: In the middle, so that a batch holds partitions both before and after the refused record.
BIG_PARTITION = 3


@pytest.fixture
def route_platform(provisioned: Platform, platform_data, platform_file: Path) -> tuple[Platform, Path]:
    return route_platform_file(platform_data, platform_file, "rep-.*", "exactly-once")


def test_exactly_once_in_order_through_worker_kills_and_new_topics(route_platform, tmp_path, chaos_rng):
    platform, platform_file = route_platform
    workers = start_route_workers(platform, platform_file, tmp_path, chaos_rng)
    traffic = Traffic(platform, chaos_rng, log_dir=tmp_path)
    new_topics = [f"rep-new-{i:02d}" for i in range(20)]
    try:
        traffic.start()
        kills = 0
        for i, topic in enumerate(new_topics):  # topics appear while workers are being killed
            dc = ("dc1", "dc2")[i % 2]
            create_topic(platform, dc, topic, 3)
            traffic.add_topic(dc, topic, 3)
            if i % 2 == 0 and kills < ROUNDS:
                workers.start(workers.kill_one())
                kills += 1
            time.sleep(chaos_rng.uniform(0.5, 2.0))
        for _ in range(ROUNDS - kills):
            time.sleep(chaos_rng.uniform(1.0, 3.0))
            workers.start(workers.kill_one())
        time.sleep(2)
    finally:
        traffic.stop()
    topics = [BASE, *new_topics]
    expected = wait_until_copied(platform, traffic, topics, workers)

    records = read_records(platform, topics)
    landed = copies_of(records)
    assert landed == expected, (
        f"missing {sum((expected - landed).values())}, duplicated {sum((landed - expected).values())}")
    order = defaultdict(list)
    for topic, partition, offset, value in sorted(records, key=lambda r: (r[0], r[1], r[2])):
        order[(value["src"], topic, value["key"])].append(value["seq"])
    assert all(seqs == sorted(seqs) for seqs in order.values()), "per-key order broken on central"
    print(f"{sum(expected.values())} events copied exactly once through {ROUNDS} kills and 20 new topics")


def test_at_least_once_mode_loses_nothing_through_worker_kills(provisioned, platform_data, platform_file, tmp_path,
                                                             chaos_rng):
    """The lower-latency mode states at-least-once: every acknowledged event lands, some perhaps
    twice after a kill, and the first copy of each keeps per-key order."""
    base = "alo-base"
    platform, path = route_platform_file(platform_data, platform_file, "alo-.*", "at-least-once")
    workers = start_route_workers(platform, path, tmp_path, chaos_rng, base)
    traffic = Traffic(platform, chaos_rng, base)
    try:
        traffic.start()
        for _ in range(ROUNDS):
            time.sleep(chaos_rng.uniform(1.0, 3.0))
            workers.start(workers.kill_one())
        time.sleep(2)
    finally:
        traffic.stop()
    wait_until_copied(platform, traffic, [base], workers)
    # The position feed: each route's copiers publish their route topic's position on its source
    # (at most every 2 s, and when they stop).
    for route, dc in zip(ROUTES, ("dc1", "dc2")):
        expected = (end_offsets(platform, dc, base), {"route topic"})
        seen: list[object] = [None]

        def holds() -> bool:
            seen[0] = monitored(platform, dc, group_name("replicate", route), {base})
            return seen[0] == expected

        try:
            eventually(holds, 60, f"{group_name('replicate', route)} on {dc} to hold {expected}")
        except AssertionError as failure:
            raise AssertionError(f"{failure}; it held {seen[0]}") from None

    records = read_records(platform, [base])
    landed = copies_of(records)
    first_copies = defaultdict(list)
    seen = set()
    for topic, _, _, value in sorted(records, key=lambda r: (r[0], r[1], r[2])):
        event = (value["src"], topic, value["key"], value["seq"])
        if event not in seen:
            seen.add(event)
            first_copies[event[:3]].append(value["seq"])
    assert all(seqs == sorted(seqs) for seqs in first_copies.values()), "per-key order broken on central"
    duplicates = sum((landed - traffic.acked).values())
    print(f"at-least-once: {sum(traffic.acked.values())} events, {duplicates} duplicates after {ROUNDS} kills")


def test_a_record_too_large_stops_its_partition_and_loses_nothing_else(provisioned, platform_data, platform_file,
                                                                       tmp_path):
    """A record the copier cannot write stops its own partition, with nothing skipped; the partitions
    copied in the same transactions go on. A route of its own with one bucket, so they share every batch."""
    base = "big-base"
    data = copy.deepcopy(platform_data)
    data["routes"] = {"dc1-big": {"source": "dc1", "destination": "central", "pattern": "big-.*", "buckets": 1}}
    path = platform_file.parent / "replicate-big.yaml"
    platform = platform_variant(data, path)
    create_topic(platform, "dc1", base, 6)
    workers = Workers(path, tmp_path, random.Random(0))  # one worker, never killed: nothing to choose
    workers.start("dc1-big-w0")
    wait_until_replicated(platform, base)
    # Above what the copier's producer takes (librdkafka's message.max.bytes, 1,000,000), below dc1's limit.
    producer = kafka.producer(platform, "dc1", "big", {"message.max.bytes": 1_048_000, "linger.ms": 100})
    wait_until_led(producer, base, 6)
    sent: Counter[int] = Counter()
    others = [p for p in range(6) if p != BIG_PARTITION]
    for round_ in range(2):
        for partition in range(6):
            for _ in range(20):
                producer.produce(base, b"small", partition=partition)
                sent[partition] += 1
        if round_ == 0:
            producer.produce(base, b"x" * 1_020_000, partition=BIG_PARTITION)
    assert producer.flush(30) == 0
    try:
        def all_copied() -> bool:
            copied = Counter(p for _, p, _, _ in read_records(platform, [base], decode=bytes))
            return all(copied[p] >= sent[p] for p in others)

        eventually(all_copied, 120, f"central to hold {dict(sent)} records on the partitions not stopped", interval=1)
        time.sleep(3)  # nothing more may come for the stopped partition
        records = read_records(platform, [base], decode=bytes)
        copied = Counter(p for _, p, _, _ in records)
        assert {p: copied[p] for p in others} == {p: sent[p] for p in others}
        # The stopped partition stays at its last committed offset: the refused record's transaction
        # held the records before it too. What it copied is a prefix, and never the refused record.
        assert copied[BIG_PARTITION] <= 20 and all(len(v) == 5 for _, p, _, v in records if p == BIG_PARTITION)
        logs = (tmp_path / "dc1-big-w0.log").read_text(errors="replace")
        assert f"{base}[{BIG_PARTITION}] offset 20: record too large" in logs
    finally:
        workers.stop_all()
