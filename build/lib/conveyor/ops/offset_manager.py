"""The offset manager's health, from the brokers' exporter readings. Pure.

Committed offsets live in ``__consumer_offsets``, a compacted topic the group coordinator loads into
memory when it takes a partition over. The field's offset incidents (docs/architecture.md, section
6) came from there: a log cleaner that stopped compacting it (the coordinator then loads a huge log,
slowly, and answered "no offset" or an old one meanwhile), and consumers that reset on those
answers. The rules:

- compaction stalled: the cleaner's max dirty ratio stays above a threshold across a window
  of samples (one high sample is a cleaner that has not got round to it yet);
- cleaner idle: the cleaner has not looked for work for long (its thread died);
- coordinator load slow: loading a ``__consumer_offsets`` partition took longer than a threshold.

The third sign, an offset fetch that answers no offset for a group that had one, is judged from
the groups' windows (``COMMIT_LOST`` in ``conveyor.ops.lag``) and worded in ``conveyor.ops.alerts``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from conveyor.config.policies import OffsetManagerPolicy
from conveyor.ops.health import BrokerReading, HealthFinding, Rule, Severity


# --- Rules: each over plain numbers ---

def compaction_stalled(dirty_percents: Sequence[float], warn: float, samples: int) -> Severity:
    """WARNING when the last ``samples`` dirty ratios are all above ``warn``."""
    recent = dirty_percents[-samples:]
    return Severity.WARNING if len(recent) >= samples and min(recent) > warn else Severity.OK


def cleaner_idle(idle_ms: float, alarm_ms: float) -> Severity:
    return Severity.CRITICAL if idle_ms > alarm_ms else Severity.OK


def coordinator_load_slow(load_ms: float, warn_ms: float) -> Severity:
    return Severity.WARNING if load_ms > warn_ms else Severity.OK


def assess_offset_manager(cluster: str, recent: Mapping[str, Sequence[BrokerReading]],
                          policy: OffsetManagerPolicy = OffsetManagerPolicy()) -> list[HealthFinding]:
    """The rules over each node's recent readings, oldest first (a node down in between starts its
    dirty window over: the caller keeps only consecutive answers)."""
    found = []
    for node, readings in sorted(recent.items()):
        if not readings or not readings[-1].up:
            continue
        latest = readings[-1]
        dirty = [r.cleaner_dirty_percent for r in readings if r.cleaner_dirty_percent is not None]
        if dirty and compaction_stalled(dirty, policy.dirty_percent_warn, policy.dirty_samples) is not Severity.OK:
            found.append(HealthFinding(Rule.COMPACTION_STALLED, Severity.WARNING, cluster, node, dirty[-1],
                                       policy.dirty_percent_warn, str(min(policy.dirty_samples, len(dirty)))))
        idle = latest.cleaner_idle_ms
        if idle is not None and cleaner_idle(idle, policy.cleaner_idle_alarm_ms) is not Severity.OK:
            found.append(HealthFinding(Rule.CLEANER_IDLE, Severity.CRITICAL, cluster, node, idle,
                                       policy.cleaner_idle_alarm_ms))
        load = latest.coordinator_load_ms
        if load is not None and coordinator_load_slow(load, policy.coordinator_load_warn_ms) is not Severity.OK:
            found.append(HealthFinding(Rule.COORDINATOR_LOAD_SLOW, Severity.WARNING, cluster, node, load,
                                       policy.coordinator_load_warn_ms))
    return found
