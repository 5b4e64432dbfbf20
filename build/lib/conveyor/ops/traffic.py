"""Broker-side read amplification per topic. Pure: no HTTP, no clock.

The read amplification found from consumer groups' commits (``conveyor.ops.rewind``) sees only
readers that commit to a group. The field's 4x incident (docs/architecture.md, section 4) was a job
keeping its offsets in its own folder: the brokers' bytes out of the topic rose while bytes in
stayed flat, and no group showed why. So the brokers' own per-topic byte counters
(``BytesInPerSec``/``BytesOutPerSec`` with a topic label) are judged too: per topic, bytes out
rising while bytes in stay flat is flagged whether or not some group's commits explain it; the
finding names the groups that do.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from conveyor.ops.health import BrokerReading, HealthFinding, Rule, Severity, rate

#: topic -> (bytes in per second, bytes out per second), summed over the brokers.
TopicRates = Mapping[str, tuple[float, float]]


@dataclass(frozen=True, slots=True)
class TrafficPolicy:
    #: Rounds of rates judged; the first half is compared with the second.
    samples: int = 6
    #: Bytes out of the second half over the first at or above this is rising.
    rise: float = 2.0
    #: Bytes in changing by at most this share between the halves is flat.
    flat: float = 0.25
    #: Below this many bytes out per second (second half) nobody cares.
    min_out_per_s: float = 1_048_576.0

    def __post_init__(self) -> None:
        if self.samples < 2 or self.rise <= 1 or not 0 <= self.flat < 1 or self.min_out_per_s < 0:
            raise ValueError("samples must be at least 2, rise above 1, flat in [0, 1), min_out_per_s >= 0")


def topic_rates(pairs: Iterable[tuple[BrokerReading, BrokerReading | None]]) -> dict[str, tuple[float, float]]:
    """Per topic, bytes in and out per second summed over the brokers, from each broker's reading
    now and before; a broker without a previous reading, or whose counters restarted, is left out."""
    rates: dict[str, list[float]] = {}
    for now, before in pairs:
        if before is None or not now.up or not before.up:
            continue
        seconds = (now.at_ms - before.at_ms) / 1000
        for topic, (bytes_in, bytes_out) in now.topic_bytes.items():
            was = before.topic_bytes.get(topic)
            if was is None:
                continue
            per_s = rate(bytes_in, was[0], seconds), rate(bytes_out, was[1], seconds)
            if per_s[0] is None or per_s[1] is None:
                continue
            total = rates.setdefault(topic, [0.0, 0.0])
            total[0] += per_s[0]
            total[1] += per_s[1]
    return {topic: (i, o) for topic, (i, o) in rates.items()}


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def out_rising_in_flat(ins: Sequence[float], outs: Sequence[float], policy: TrafficPolicy) -> bool:
    """Over the last ``policy.samples`` rates: bytes out of the second half at least ``rise`` times the
    first half's (and above ``min_out_per_s``) while bytes in moved by at most ``flat`` of their level."""
    if len(ins) < policy.samples or len(outs) < policy.samples:
        return False
    half = policy.samples // 2
    ins, outs = ins[-policy.samples:], outs[-policy.samples:]
    in_before, in_after = _mean(ins[:half]), _mean(ins[half:])
    out_before, out_after = _mean(outs[:half]), _mean(outs[half:])
    rising = out_after >= policy.min_out_per_s and out_after >= policy.rise * out_before
    flat = abs(in_after - in_before) <= policy.flat * max(in_before, in_after)
    return rising and flat


def assess_traffic(cluster: str, history: Sequence[TopicRates], explained: Mapping[str, Sequence[str]],
                   policy: TrafficPolicy = TrafficPolicy()) -> list[HealthFinding]:
    """A finding per topic whose bytes out rise while its bytes in stay flat over ``history`` (one
    TopicRates per round, oldest first). ``explained``: topic -> the groups whose commits show read
    amplification on it, named in the finding's detail (empty: no group explains it)."""
    found = []
    for topic in sorted({t for rates in history for t in rates}):
        series = [rates[topic] for rates in history if topic in rates]
        ins, outs = [i for i, _ in series], [o for _, o in series]
        if out_rising_in_flat(ins, outs, policy):
            half = policy.samples // 2
            before = _mean(outs[-policy.samples:][:half])
            groups = explained.get(topic, ())
            why = (f"the commits of group(s) {', '.join(groups)} show them reading it again" if groups else
                   "no consumer group's commits explain it: a reader that keeps its offsets elsewhere is reading "
                   "it again")
            found.append(HealthFinding(Rule.TOPIC_AMPLIFICATION, Severity.WARNING, cluster, topic, outs[-1], before,
                                       why))
    return found
