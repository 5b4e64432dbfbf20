"""One replicator service for every route: two worker processes serve both data centres' routes;
they are SIGKILLed at random and restarted, the central broker coordinating a route's group (the
controller that assigns its buckets) is SIGKILLed and restarted, and a route added to platform.yaml
mid-run is served by the running processes without a restart. The routes copy an exact topic and one delivered at
least once side by side: central must hold exactly the exact topics' source events, each once,
and every event of the other at least once.

CONVEYOR_CHAOS_ROUNDS sets the kills (default 2 here: 1 before the route is added, 1 after; 4 or more for a
longer run).
"""

from __future__ import annotations

import copy
import os
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import KafkaException

from conveyor import kafka
from conveyor.config import Platform
from conveyor.replicate import plan
from conveyor.runtime.local import LocalPlatform
from tests.conftest import eventually, platform_variant
from tests.replicatekit import (Traffic, Workers, copies_of, create_topic, read_records, wait_until_copied,
                                wait_until_replicated)

pytestmark = pytest.mark.chaos
ROUNDS = int(os.environ.get("CONVEYOR_CHAOS_ROUNDS", "2"))
BASE, LATE, LOGS = "svc-base", "late-a", "svc-logs"


def _routes(platform_data, platform_file: Path, path: Path, late: bool) -> Platform:
    data = copy.deepcopy(platform_data)
    for spec in data["topics"].values():
        if spec.get("contract"):
            spec["contract"] = str(platform_file.parent / spec["contract"])
    data["topics"][LOGS] = {"partitions": 6, "delivery": "at_least_once"}
    data["routes"] = {f"svc-{dc}": {"source": dc, "destination": "central", "pattern": "svc-.*", "buckets": 6,
                                    "requested": False} for dc in ("dc1", "dc2")}
    if late:
        data["routes"]["svc-late"] = {"source": "dc1", "destination": "central", "pattern": "late-.*", "buckets": 3,
                                      "requested": False}
    return platform_variant(data, path)


def _group(platform: Platform, route: str):
    admin = kafka.admin(platform, "central")
    return kafka.describe_groups(admin, [plan.group_id(route)])[plan.group_id(route)]


def _members(platform: Platform, route: str) -> set[str]:
    return {m.client_id for m in _group(platform, route).members}


def _kill_coordinator(local: LocalPlatform, platform: Platform, route: str, rng) -> int:
    """SIGKILL the central broker coordinating the route's group; once another broker coordinates
    it, start the killed one again. The killed broker's id."""
    coordinator = _group(platform, route).coordinator.id
    assert local.kill_broker("central", coordinator) is not None, f"central broker {coordinator} was not running"
    try:
        eventually(lambda: _group(platform, route).coordinator.id != coordinator, 90,
                   f"another broker to coordinate {route}'s group", errors=(KafkaException,), interval=1.0)
        time.sleep(rng.uniform(1.0, 3.0))
    finally:
        local.start_brokers("central", coordinator)
    return coordinator


def test_workers_of_every_route_lose_nothing_through_kills_and_take_a_route_added_live(
        provisioned, local, platform_data, platform_file, tmp_path, chaos_rng):
    path = tmp_path / "routes.yaml"
    platform = _routes(platform_data, platform_file, path, late=False)
    for dc in ("dc1", "dc2"):
        create_topic(platform, dc, BASE, 6)
        create_topic(platform, dc, LOGS, 6)
    workers = Workers(path, tmp_path, chaos_rng)
    for i in range(2):
        workers.start(f"all-w{i}")
    wait_until_replicated(platform, BASE)
    traffic = Traffic(platform, chaos_rng, BASE, log_dir=tmp_path)
    for dc in ("dc1", "dc2"):
        traffic.add_topic(dc, LOGS, 6)
    killed = []
    try:
        traffic.start()
        for _ in range(ROUNDS // 2):
            time.sleep(chaos_rng.uniform(1.0, 3.0))
            killed.append(workers.kill_one())
            workers.start(killed[-1])
        killed.append(f"central broker {_kill_coordinator(local, platform, 'svc-dc1', chaos_rng)}")

        # A route added to the file: the running processes serve it, none restarted.
        running = {name: proc.pid for name, proc in workers.procs.items()}
        platform = _routes(platform_data, platform_file, path, late=True)
        create_topic(platform, "dc1", LATE, 3)
        traffic.add_topic("dc1", LATE, 3)
        wait_until_replicated(platform, LATE)
        # Generous: a worker whose route ended when the coordinator died restarts it before it reads
        # the file again, and joining a group whose coordinator just moved takes a rebalance or two.
        seen: list[set[str]] = [set()]

        def both_joined() -> bool:
            seen[0] = _members(platform, "svc-late")
            return seen[0] == {"svc-late-all-w0", "svc-late-all-w1"}

        try:
            eventually(both_joined, 150, "both running workers in the new route's group", errors=(KafkaException,),
                       interval=1.0)
        except AssertionError as err:
            raise AssertionError(f"{err}; its members last: {sorted(seen[0])}") from None
        assert {name: proc.pid for name, proc in workers.procs.items()} == running

        for _ in range(ROUNDS - ROUNDS // 2):
            time.sleep(chaos_rng.uniform(1.0, 3.0))
            killed.append(workers.kill_one())
            workers.start(killed[-1])
        time.sleep(2)
    finally:
        traffic.stop()
    assert len(killed) == ROUNDS + 1
    exact = [BASE, LATE]
    expected = wait_until_copied(platform, traffic, [*exact, LOGS], workers)
    landed = copies_of(read_records(platform, [*exact, LOGS]))
    of_exact = Counter({event: n for event, n in expected.items() if event[1] != LOGS})
    assert Counter({e: n for e, n in landed.items() if e[1] != LOGS}) == of_exact, (
        f"missing {sum((of_exact - landed).values())}, duplicated {sum((landed - expected).values())}")
    assert not expected - landed, "an event of the at-least-once topic is missing"
    # The at-least-once topic had copiers of its own, without transactions, in every worker run.
    takeovers = "".join(log.read_text() for log in tmp_path.glob("all-w*.log"))
    assert "(at-least-once): taken over" in takeovers and "(exactly-once): taken over" in takeovers
    print(f"{sum(of_exact.values())} exact events of 3 routes copied exactly once, and "
          f"{sum(expected.values()) - sum(of_exact.values())} at-least-once events with "
          f"{sum((landed - expected).values())} copies, through {ROUNDS} kills of every-route workers and one of "
          f"a group's coordinator ({', '.join(killed)})")
