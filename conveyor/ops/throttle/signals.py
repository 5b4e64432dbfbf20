"""What the throttle controller looks at: broker busyness and where each consumer reads.

- Produce request time p99 per broker: the JMX exporter's
  ``kafka_network_requestmetrics_totaltimems{request="Produce",quantile="0.99"}``, as the Prometheus
  that scrapes it last read it (``conveyor.ops.broker_readings``; ``policy`` says why not the fetch
  p99). Without a Prometheus, or for a broker whose page failed its latest scrape, there is no signal.
- Disk utilisation per broker: for the brokers whose data folder the cluster's ``disks`` names, the
  share of wall time the device holding it was busy, from the ``io_ticks`` column of
  ``/proc/diskstats`` between two rounds (the first round has none). A folder on a device that
  ``/proc/diskstats`` does not list (overlay or tmpfs in a container) gives no disk signal.
- Consumers: every consumer group's members (client id and assigned partitions), the group's
  committed offsets and the partitions' end offsets and leaders, sampled by
  :class:`~conveyor.ops.sampler.OffsetSampler`. A partition without a commit has no known lag
  and does not count either way. Readers on the position feed count too, under the client ids
  their monitoring commits name (``policy.feed_readers``).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from conveyor import kafka
from conveyor.acls.parts import DISPATCH_NODES_GROUP_PREFIX
from conveyor.config import Platform
from conveyor.ops.errors import SampleError
from conveyor.ops.sampler import SamplerProcess
from conveyor.ops.broker_readings import metrics_targets, read_brokers
from conveyor.ops.prometheus import NO_PROMETHEUS, QueryError, connect
from conveyor.ops.throttle.policy import Assigned, BrokerSignal, Consumer, feed_readers

DISKSTATS = Path("/proc/diskstats")
log = logging.getLogger(__name__)


def io_ticks(diskstats: str, device: tuple[int, int]) -> int | None:
    """Milliseconds ``device`` (major, minor) spent doing I/O, from ``/proc/diskstats`` text."""
    for line in diskstats.splitlines():
        fields = line.split()
        if len(fields) > 12 and (int(fields[0]), int(fields[1])) == device:
            return int(fields[12])
    return None


def utilisation(ticks_before: int | None, ticks_after: int | None, seconds: float) -> float | None:
    """Share of ``seconds`` the device was busy, 0..1; None when unknown."""
    if ticks_before is None or ticks_after is None or seconds <= 0 or ticks_after < ticks_before:
        return None
    return min((ticks_after - ticks_before) / 1000 / seconds, 1.0)


def _device(path: Path) -> tuple[int, int] | None:
    try:
        dev = os.stat(path).st_dev
    except OSError:
        return None
    return os.major(dev), os.minor(dev)


class SignalReader:
    """Reads broker signals each round; keeps the previous disk reading for utilisation."""

    def __init__(self, platform: Platform, cluster: str) -> None:
        self.platform, self.cluster = platform, cluster
        self.targets = [t for t in metrics_targets(platform, cluster) if t.broker is not False]
        self.devices = {broker: device for broker, folder in platform.cluster(cluster).disks.items()
                        if (device := _device(platform.resolve(folder))) is not None}
        self._ticks: dict[int, int | None] = {}
        self._at = 0.0
        self.prometheus = connect(platform)
        if self.prometheus is None:
            log.warning("%s: the produce p99 is not judged, only the disks: %s", cluster, NO_PROMETHEUS)
        # In a child process: librdkafka's group admin calls can kill the process (conveyor.ops.sampler).
        self.sampler = SamplerProcess(platform, cluster)
        self._admin: AdminClient | None = None

    def disk(self) -> dict[int, float | None]:
        if not self.devices or not DISKSTATS.exists():
            return {}
        text, now = DISKSTATS.read_text(), time.monotonic()
        ticks = {b: io_ticks(text, device) for b, device in self.devices.items()}
        util = {b: utilisation(self._ticks.get(b), ticks[b], now - self._at) for b in ticks}
        self._ticks, self._at = ticks, now
        return util

    def brokers(self) -> list[BrokerSignal]:
        """Each broker's signals; without Prometheus's answer, the disk's alone."""
        disk = self.disk()
        p99: dict[int, float | None] = {}
        if self.prometheus is not None:
            try:
                p99 = {r.broker_id: r.p99_ms.get("Produce")
                       for r in read_brokers(self.prometheus, self.cluster, self.targets, 0)
                       if r.error is None and r.broker_id is not None}
            except QueryError as err:
                log.warning("%s: the produce p99 is not judged this round, only the disks: %s", self.cluster, err)
        # A broker with neither figure gives no signal, so it neither makes nor clears "busy".
        return [BrokerSignal(t.broker_id, p99.get(t.broker_id), disk.get(t.broker_id)) for t in self.targets
                if t.broker_id is not None and (t.broker_id in p99 or disk.get(t.broker_id) is not None)]

    def consumers(self) -> list[Consumer]:
        snapshot = self.sampler.sample()
        # Readers seen only through the position feed: their monitoring groups have no members.
        fed = [consumer for g in snapshot.groups if g.readers
               for consumer in feed_readers(g.group, g.readers, g.committed or {}, snapshot.ends, snapshot.leaders())]
        # A share dispatcher's presence consumer never fetches, yet shares its node's client id: as a
        # member without commits it would count as a tail reader and spare that client id for ever.
        committed = {g.group: g.committed or {} for g in snapshot.groups
                     if not g.readers and not g.group.startswith(DISPATCH_NODES_GROUP_PREFIX)}
        if not committed:
            return fed
        try:
            if self._admin is None:
                self._admin = kafka.admin(self.platform, self.cluster)
            described = kafka.describe_groups(self._admin, list(committed))
        except KafkaException as exc:
            raise SampleError(self.cluster, f"describing consumer groups: {exc}") from None
        return fed + [
            Consumer(group, member.client_id, _assigned(member.assignment.topic_partitions if member.assignment else [],
                                                        committed[group], snapshot.ends, snapshot.leaders()))
            for group, description in sorted(described.items()) for member in description.members
        ]

    def close(self) -> None:
        if self.prometheus is not None:
            self.prometheus.close()
        self.sampler.close()


def _assigned(partitions: list, committed: Mapping[tuple[str, int], int], ends: Mapping[tuple[str, int], int],
              leaders: Mapping[tuple[str, int], int]) -> tuple[Assigned, ...]:
    out = []
    for tp in partitions:
        key = (tp.topic, tp.partition)
        if key in committed and key in ends:
            leader = leaders.get(key)
            out.append(Assigned(tp.topic, tp.partition, max(ends[key] - committed[key], 0),
                                leader if leader is not None and leader >= 0 else None))
    return tuple(out)
