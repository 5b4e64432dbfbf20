"""Which configs a copied topic takes from its source. Pure: no Kafka here.

A topic declared in platform.yaml is the provisioner's: the destination gets its declaration, as
`conveyor topics apply` would give it. A topic a route copies because its ``pattern`` matched, and
that platform.yaml does not declare, has no declaration; its copy takes the source topic's own
configs instead, so a compacted topic stays compacted and a topic kept for 30 days is not cut to
Kafka's default 7 on the destination. Two of them are bounded by what the destination can do, and a
source value the destination cannot take is a :class:`ConfigDifference`, reported, never silent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

CLEANUP_POLICY = "cleanup.policy"
RETENTION_MS = "retention.ms"
RETENTION_BYTES = "retention.bytes"
MAX_MESSAGE_BYTES = "max.message.bytes"
COMPRESSION_TYPE = "compression.type"
MIN_INSYNC = "min.insync.replicas"
#: The source configs a copied, undeclared topic takes.
MIRRORED = (CLEANUP_POLICY, RETENTION_MS, RETENTION_BYTES, MAX_MESSAGE_BYTES, COMPRESSION_TYPE, MIN_INSYNC)

#: Most bytes of records the copier's producer puts in one batch (its ``batch.size``).
COPY_BATCH_BYTES = 1_000_000
#: Kafka's default max.message.bytes. The copier does not write the source's batches: it batches
#: records of many source batches up to COPY_BATCH_BYTES (plus framing), and a destination topic
#: with a lower limit would refuse those batches (librdkafka does not split a refused batch), so a
#: copy never gets less than this.
MIN_COPY_MAX_MESSAGE_BYTES = 1_048_588


@dataclass(frozen=True)
class ConfigDifference:
    """A source config value the destination's copy does not have."""

    topic: str
    config: str
    source: str
    #: What the destination has or gets instead; None while the topic is not on the destination.
    destination: str | None
    reason: str

    def __str__(self) -> str:
        return (f"{self.topic}: {self.config} is {self.source} on the source but "
                f"{self.destination if self.destination is not None else 'unset'} on the destination: {self.reason}")


@dataclass(frozen=True)
class MirroredConfigs:
    """What the destination topic gets, and the source values it cannot take."""

    configs: dict[str, str]
    differences: tuple[ConfigDifference, ...]


def mirror_configs(topic: str, source: Mapping[str, str], destination: str, replication_factor: int,
                   min_insync_floor: int) -> MirroredConfigs:
    """The configs of the copy of undeclared ``topic`` on ``destination``, from the ``source``
    topic's configs (the keys of MIRRORED it has). ``replication_factor`` is the copy's on the
    destination; ``min_insync_floor`` the destination's own min.insync.replicas for its topics."""
    configs: dict[str, str] = {}
    differences: list[ConfigDifference] = []
    for key in (CLEANUP_POLICY, RETENTION_MS, RETENTION_BYTES, COMPRESSION_TYPE):
        if key in source:
            configs[key] = source[key]
    if MAX_MESSAGE_BYTES in source:
        wanted = _int(source[MAX_MESSAGE_BYTES])
        if wanted is not None and wanted < MIN_COPY_MAX_MESSAGE_BYTES:
            configs[MAX_MESSAGE_BYTES] = str(MIN_COPY_MAX_MESSAGE_BYTES)
            differences.append(ConfigDifference(
                topic, MAX_MESSAGE_BYTES, source[MAX_MESSAGE_BYTES], configs[MAX_MESSAGE_BYTES],
                f"the copier writes batches of up to {COPY_BATCH_BYTES:,} bytes, which a lower limit on "
                f"{destination} would refuse; every record the source took still fits"))
        else:
            configs[MAX_MESSAGE_BYTES] = source[MAX_MESSAGE_BYTES]
    # min.insync.replicas guards writes on the cluster that holds them. A one-broker data centre
    # can only have 1, and copying that would weaken the destination below its own setting; above
    # the copy's replication factor, every write to it would fail (NOT_ENOUGH_REPLICAS).
    floor = min(min_insync_floor, replication_factor)
    wanted = _int(source.get(MIN_INSYNC, ""))
    if wanted is None:
        configs[MIN_INSYNC] = str(floor)
    elif wanted > replication_factor:
        configs[MIN_INSYNC] = str(replication_factor)
        differences.append(ConfigDifference(
            topic, MIN_INSYNC, source[MIN_INSYNC], configs[MIN_INSYNC],
            f"above the copy's replication factor {replication_factor} on {destination}, where no write "
            "could succeed; raise the replication factor there to have it"))
    else:
        configs[MIN_INSYNC] = str(max(wanted, floor))
    return MirroredConfigs(configs, tuple(differences))


def not_applied(topic: str, source: Mapping[str, str], wanted: Mapping[str, str], live: Mapping[str, str],
                reason: str) -> tuple[ConfigDifference, ...]:
    """The configs whose ``wanted`` value the live destination topic does not have (yet)."""
    return tuple(ConfigDifference(topic, key, source.get(key, value), live.get(key), reason)
                 for key, value in sorted(wanted.items()) if live.get(key) != value)


def _int(value: str) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None
