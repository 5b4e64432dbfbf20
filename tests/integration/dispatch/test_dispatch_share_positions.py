"""The share-backed dispatcher on the position feed, against real brokers: its share group's start
offsets reach ``conveyor.dispatch.<group>``, which ops evaluates like any group (lag 0 once every
message is acked, N while N are not), and the feed names the node's client id for the throttle."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conveyor import kafka
from conveyor.config import Platform
from conveyor_sdk.subscriber import Subscriber
from conveyor.dispatch.share_positions import STORE
from conveyor.dispatch.source import CLIENT_ID_PREFIX
from conveyor.kafka_tools import KafkaTools
from conveyor.ops.tracker import GroupReport
from conveyor.ops.watch import ClusterWatch
from conveyor.positions import client_ids, group_name
from tests.conftest import eventually
from tests.dispatchkit import MAILER_TOKEN, Ledger, produce, start_node, topic_maker
from tests.dispatchkit import nodes  # noqa: F401 (a fixture)
from tests.opskit import cluster_watch
from tests.positionkit import end_offsets, monitored

pytestmark = pytest.mark.integration


@pytest.fixture
def setup(platform_file: Path, platform_data: dict[str, Any], provisioned: Platform,
          topic_factory: Callable[..., str]) -> Callable[..., tuple[Platform, str]]:
    return topic_maker(platform_file, platform_data, topic_factory, backend="share", position_interval="1s")


def _commit_metadata(platform: Platform, group: str) -> set[tuple[str, ...]]:
    """The client ids each partition's monitoring commit names."""
    return {client_ids(tp.metadata) for tp in kafka.committed(platform, "central", group) if tp.offset >= 0}


def _lag_shown(watch: ClusterWatch, group: str, lag: int) -> GroupReport | None:
    """The group's report of a new round, if it shows ``lag``."""
    report = watch.cycle()
    shown = next(g for g in report.groups if g.group == group)
    return shown if shown.status.total_lag == lag else None


def test_the_share_groups_start_offsets_reach_ops_with_the_right_lag(setup, nodes) -> None:
    platform, topic = setup()
    node = start_node(platform)
    nodes.append(node)
    group = f"mailer.{uuid.uuid4().hex[:6]}"
    feed_group = group_name("dispatch", group)
    sent = set(produce(platform, topic, 60))
    ledger = Ledger()

    def handler(message) -> None:
        ledger.delivered(0, message.partition, message.offset, message.value)

    with Subscriber(topic, group, handler, 4, nodes=[node.advertise], token=MAILER_TOKEN,
                    on_committed=ledger.committed, relocate_every=1.0):
        eventually(lambda: ledger.confirmed_values() >= sent, 60, "every message acked")
        ends = end_offsets(platform, "central", topic)
        # The broker's own reading: nothing left to settle (its start offsets trail, share_positions).
        tools = KafkaTools(platform, "central")
        eventually(lambda: {k: o.lag for k, o in tools.share_group_offsets(group).items()} == dict.fromkeys(ends, 0),
                   60, "the share group's state to show no lag", interval=1.0)
        eventually(lambda: monitored(platform, "central", feed_group) == (ends, {STORE}), 60,
                   f"{feed_group} to hold the end offsets")
    assert _commit_metadata(platform, feed_group) == {(CLIENT_ID_PREFIX + node.advertise,)}
    with cluster_watch(platform) as watch:
        report = watch.cycle()
        shown = next(g for g in report.groups if g.group == feed_group)
        assert shown.kept_in == STORE and shown.status.total_lag == 0

        # Ten more, and no client: the node acquires them but nobody acks, so the position stays.
        produce(platform, topic, 10, start=60)
        later = end_offsets(platform, "central", topic)
        assert sum(later.values()) - sum(ends.values()) == 10
        time.sleep(3)  # three publishing intervals: nothing to wait for, the position must not move
        assert monitored(platform, "central", feed_group)[0] == ends
        # A round whose ListOffsets fails for a partition keeps its last reading (ops/sampler.py); the
        # run that failed here logged NOT_LEADER from leaders moving back to a restarted broker.
        shown = eventually(lambda: _lag_shown(watch, feed_group, 10), 30, "ops to show a lag of 10")
        assert shown.status.total_lag == 10 and monitored(platform, "central", feed_group)[0] == ends
