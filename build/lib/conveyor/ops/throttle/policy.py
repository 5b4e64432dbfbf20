"""Smart throttling of lagging consumers. Pure: no Kafka, no clock.

When a broker is busy (its produce request p99 or its disk utilisation at or above a threshold),
consumers far behind the tail are the ones reading old segments from disk and
evicting the page cache that producers and tail readers live on. They get a ``consumer_byte_rate``
quota on their client id; consumers at the tail never do. A quota is lifted when its broker is
healthy again, when the client caught up, or when it no longer reads from a busy broker.

Why produce p99 and not the consumers' fetch p99: a fetch request's total time includes the time
the broker holds it waiting for new data (``fetch.max.wait.ms``, 500 ms by default), so tail
consumers on an idle topic show a fetch p99 of about 500 ms on a perfectly healthy broker. Produce
time is what a busy disk hurts first (docs/architecture.md, section 6), and it has no
such wait.

The rules, each a small function over plain numbers, tested from a table:

- :func:`broker_busy`: busy at or above any threshold; once busy, a broker stays busy until every
  signal is below ``healthy_ratio`` of its threshold, so a quota does not flap on and off around
  the line.
- :func:`client_verdict`: a client id is throttled when one of its partitions is at least
  ``lag_far`` records behind and led by a busy broker, unless any consumer using that client id
  is at the tail (a quota applies to the client id everywhere, and must never slow a tail reader).
- :func:`feed_readers`: a reader seen only through the position feed (the lake, the replicator,
  the real-time job, the share dispatcher: ``conveyor.positions``) is a consumer under each client
  id its monitoring commits name, reading the partitions those commits cover; the rules above then
  judge it like any other. A reader whose commits name no client id cannot be throttled.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum


@dataclass(frozen=True)
class ThrottlePolicy:
    #: Produce request time p99, milliseconds, at or above which a broker is busy.
    p99_busy_ms: float = 500.0
    #: Disk utilisation (0..1, share of time the device was busy) at or above which a broker is busy.
    disk_busy: float = 0.9
    #: A busy broker is healthy again when every signal is below this share of its threshold.
    healthy_ratio: float = 0.7
    #: Records behind the partition end that count as far behind the tail (read from disk).
    lag_far: int = 10_000
    #: Records behind at or under which a consumer is at the tail, on every partition it reads.
    lag_tail: int = 1_000
    #: consumer_byte_rate set on a throttled client id, bytes/s per broker.
    quota_bytes: int = 1_048_576

    def __post_init__(self) -> None:
        if not 0 < self.healthy_ratio <= 1:
            raise ValueError("healthy_ratio must be in (0, 1]")
        if self.lag_tail >= self.lag_far:
            raise ValueError("lag_tail must be below lag_far")
        if self.quota_bytes < 1:
            raise ValueError("quota_bytes must be at least 1 byte/s")


@dataclass(frozen=True)
class BrokerSignal:
    broker: int
    produce_p99_ms: float | None = None
    #: Share of the last interval the broker's data disk was busy (0..1); None when unknown.
    disk_util: float | None = None


@dataclass(frozen=True)
class Assigned:
    """One partition a consumer reads: its lag and the broker it fetches from."""

    topic: str
    partition: int
    lag: int
    leader: int | None


@dataclass(frozen=True)
class Consumer:
    group: str
    client_id: str
    partitions: tuple[Assigned, ...]


class Action(str, Enum):
    SET = "set"
    LIFT = "lift"


@dataclass(frozen=True)
class Decision:
    action: Action
    client_id: str
    reason: str
    #: The quota set (bytes/s); None for a lift.
    rate: int | None = None


@dataclass(frozen=True)
class Round:
    """One round's outcome: which brokers are busy and why, and what to change."""

    busy: Mapping[int, str]
    decisions: tuple[Decision, ...]
    #: Clients left alone this round and why (for the log: "never on consumers at the tail").
    spared: Mapping[str, str] = field(default_factory=dict)


def _signals(signal: BrokerSignal, policy: ThrottlePolicy) -> list[tuple[str, float, float]]:
    """(name, value, threshold) of each signal the broker reported."""
    values = [("produce p99", signal.produce_p99_ms, policy.p99_busy_ms, "ms"),
              ("disk util", signal.disk_util, policy.disk_busy, "")]
    return [(f"{name} {value:g}{unit}", value, limit) for name, value, limit, unit in values if value is not None]


def broker_busy(signal: BrokerSignal, was_busy: bool, policy: ThrottlePolicy) -> str | None:
    """Why the broker is busy, or None when it is not (with hysteresis, see module doc)."""
    signals = _signals(signal, policy)
    over = [f"{text} >= {limit:g}" for text, value, limit in signals if value >= limit]
    if over:
        return ", ".join(over)
    if was_busy:
        lingering = [f"{text} not yet below {limit * policy.healthy_ratio:g}"
                     for text, value, limit in signals if value >= limit * policy.healthy_ratio]
        if lingering:
            return "still busy: " + ", ".join(lingering)
    return None


def at_tail(consumer: Consumer, policy: ThrottlePolicy) -> bool:
    return all(a.lag <= policy.lag_tail for a in consumer.partitions)


def client_verdict(consumers: Iterable[Consumer], busy: Mapping[int, str],
                   policy: ThrottlePolicy) -> tuple[bool, str]:
    """(throttle?, why) for the consumers sharing one client id."""
    consumers = list(consumers)
    tail = [c for c in consumers if at_tail(c, policy)]
    if tail:
        return False, f"at the tail (group {tail[0].group}): never throttled"
    far = [(c, a) for c in consumers for a in c.partitions if a.lag >= policy.lag_far and a.leader in busy]
    if not far:
        if not busy:
            return False, "no broker is busy"
        return False, f"not {policy.lag_far:,} records behind on a partition of a busy broker"
    consumer, worst = max(far, key=lambda pair: pair[1].lag)
    return True, (f"group {consumer.group} is {worst.lag:,} records behind on {worst.topic}-{worst.partition}, "
                  f"led by busy broker {worst.leader} ({busy[worst.leader]})")


def feed_readers(group: str, readers: Mapping[tuple[str, int], Iterable[str]], committed: Mapping[tuple[str, int], int],
                 ends: Mapping[tuple[str, int], int], leaders: Mapping[tuple[str, int], int]) -> list[Consumer]:
    """The consumers a monitoring group stands for: one per client id its commits name (``readers``:
    partition -> client ids), with the lag and leader of each partition it reads. A partition with
    no end offset known yet is left out, as for members of ordinary groups."""
    partitions: dict[str, list[Assigned]] = {}
    for key in sorted(readers):
        if key not in committed or key not in ends:
            continue
        leader = leaders.get(key)
        assigned = Assigned(key[0], key[1], max(ends[key] - committed[key], 0),
                            leader if leader is not None and leader >= 0 else None)
        for client_id in readers[key]:
            partitions.setdefault(client_id, []).append(assigned)
    return [Consumer(group, client_id, tuple(assigned)) for client_id, assigned in sorted(partitions.items())]


def decide(signals: Iterable[BrokerSignal], consumers: Iterable[Consumer], quotas: Mapping[str, int],
           previously_busy: Iterable[int], policy: ThrottlePolicy) -> Round:
    """One round. ``quotas``: the quotas this controller set earlier (client id -> bytes/s); quotas
    set by anyone else are not ours to lift and are not passed in."""
    was = set(previously_busy)
    busy = {s.broker: why for s in signals if (why := broker_busy(s, s.broker in was, policy)) is not None}
    by_client: dict[str, list[Consumer]] = {}
    for consumer in consumers:
        by_client.setdefault(consumer.client_id, []).append(consumer)
    decisions, spared = [], {}
    for client_id in sorted(by_client):
        throttle, why = client_verdict(by_client[client_id], busy, policy)
        if throttle and quotas.get(client_id) != policy.quota_bytes:
            decisions.append(Decision(Action.SET, client_id, why, policy.quota_bytes))
        elif not throttle and client_id in quotas:
            decisions.append(Decision(Action.LIFT, client_id, why))
        elif not throttle:
            spared[client_id] = why
    for client_id in sorted(set(quotas) - set(by_client)):
        decisions.append(Decision(Action.LIFT, client_id, "no consumer uses this client id any more"))
    return Round(busy, tuple(decisions), spared)
