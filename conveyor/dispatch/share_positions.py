"""The share-backed dispatcher on the position feed (``conveyor.positions``): ``conveyor.dispatch.<group>``.

A share group (KIP-932) keeps its progress in the share-group state, not in committed offsets, so
consumer-group lag never sees it. Each node therefore publishes, every ``dispatch.position_interval``
seconds, a position per partition of its topic read from the **broker's share-group state**:
the partition's end offset minus the state's lag, the records neither acknowledged nor archived
(KIP-1226), delivered or not; never below the share-partition start offset (SPSO). Lag in ops is
then exactly the records the group has still to settle.

Why not the SPSO itself: the start offset the share coordinator keeps is the one last written to
the state, and it trails. Seen on Kafka 4.3.1 with every record of a 3-partition topic acknowledged:
start offsets 0, 0 and 8 against ends 27, 20 and 13, with a lag of 0 on each. The lag is exact.

Why not what the node itself tracks (its lowest unsettled offset): the broker spreads a partition's
records over every node of the group, and a node hears only of the records it acquired. It knows
nothing of the records another node holds, and a record it RELEASEd may be accepted by another
node without it ever knowing; with two nodes each would publish a different, wrong position over
the other's. The broker's state is the same for every node, so which node published last does
not matter.

How it is read: confluent-kafka 2.16.1 (the installed client) has no share-group admin call (no
``list_share_group_offsets``, no share-group describe), so the state comes from Kafka's own
ShareGroupCommand (``kafka-share-groups --describe --offsets``, i.e. Java's
``Admin.listShareGroupOffsets``) through :class:`~conveyor.kafka_tools.KafkaTools`: one short
JVM per reading (about 2 s of CPU), hence a reading every 15 s by default and not on every ack.
The end offsets are read just before it, so a record arriving meanwhile counts as lag (the state's
lag includes it) rather than hiding. That alone would publish a position below an earlier one
whenever records arrive during the reading (seen in CI: ten records produced while the JVM ran
moved a settled group's position back by ten, which ops reads as a rewind). So the ends are read
again after it: unchanged, the reading is exact; moved, the settled count lies between the two
ends minus the lag, and the position is the group's last published one kept within those bounds
(records once settled stay settled, so the feed never moves back on traffic alone).

Client ids, for the throttle: every node's share consumers use ``conveyor-dispatch@<host:port>``,
and each node is a member of the pair's presence group under that same client id, so the commit
metadata names the client ids of the presence group's members: all of the group's readers.
"""

from __future__ import annotations

import logging
import threading

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from conveyor import kafka
from conveyor.config import Platform
from conveyor.kafka_tools import KafkaToolError, KafkaTools, ShareOffsets
from conveyor.positions import PositionFeed, group_name

log = logging.getLogger(__name__)

#: What the feed's metadata names as the real position's home.
STORE = "share-group state"


def share_position(offsets: ShareOffsets, before: int | None, after: int | None = None,
                   floor: int | None = None) -> int:
    """The position that makes ops' lag (end minus position) the records the group has still to
    settle. ``before`` and ``after``: the partition's end offset read just before and just after the
    state; ``floor``: the position published last. Never below the start offset. Pure."""
    if before is None or offsets.lag is None:
        return offsets.start
    lowest = before - offsets.lag
    if after is not None and after != before and floor is not None:
        # Records arrived during the reading: the settled count is at least the lowest, at most
        # after minus the lag; the last published position, kept in those bounds, does not go back.
        lowest = max(lowest, min(floor, after - offsets.lag))
    return max(lowest, offsets.start)


class SharePositions:
    """Reads the share group's start offsets and publishes them, on a thread of its own (a reading
    takes seconds; the node's housekeeping loop must not wait). Constructing it does no I/O."""

    def __init__(self, platform: Platform, cluster: str, topic: str, group: str, presence_group: str,
                 interval: float, tools: KafkaTools | None = None) -> None:
        self.topic, self.group, self.presence_group, self.interval = topic, group, presence_group, interval
        self._platform, self._cluster = platform, cluster
        self.tools = tools or KafkaTools(platform, cluster, timeout=max(60.0, interval * 4))
        self.feed = PositionFeed(platform, cluster, group_name("dispatch", group), STORE)
        self._admin: AdminClient | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"share-positions-{self.group}")
        self._thread.start()

    def stop(self) -> None:
        """Stop reading; a JVM under way is left to end (it only reads)."""
        self._stop.set()

    def publish_once(self) -> dict[tuple[str, int], int]:
        """Read the group's position on the node's topic and publish it with the readers' client ids;
        what was published. Failures are logged, never raised: the feed never fails the reader."""
        try:
            before = self._ends()
            state = self.tools.share_group_offsets(self.group)
            after = self._ends()
            floor = self.feed.committed() if after != before else {}
        except (KafkaToolError, KafkaException) as exc:  # the state, the ends or the feed are not readable now
            log.warning("share group %s: position not read: %s", self.group, exc)
            return {}
        positions = {key: share_position(offsets, before.get(key), after.get(key), floor.get(key))
                     for key, offsets in state.items() if key[0] == self.topic}
        if positions:
            self.feed.name_clients(self._client_ids())
            self.feed.publish(positions)
        return positions

    @property
    def admin(self) -> AdminClient:
        if self._admin is None:
            self._admin = kafka.admin(self._platform, self._cluster)
        return self._admin

    def _ends(self) -> dict[tuple[str, int], int]:
        partitions = self.admin.list_topics(self.topic, timeout=10).topics[self.topic].partitions
        asked = {TopicPartition(self.topic, p): OffsetSpec.latest() for p in partitions}
        return {(tp.topic, tp.partition): future.result().offset
                for tp, future in self.admin.list_offsets(asked, request_timeout=10).items()}

    def _client_ids(self) -> list[str]:
        try:
            described = kafka.describe_groups(self.admin, [self.presence_group], self.interval)
            return sorted({m.client_id for m in described[self.presence_group].members})
        except KafkaException as exc:
            log.warning("presence group %s not described: %s", self.presence_group, exc)
            return []

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.interval):
                self.publish_once()
        finally:
            self.feed.close()
