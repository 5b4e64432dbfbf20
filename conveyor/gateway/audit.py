"""Audit counts: the exact number of accepted events per (topic, event hour, gateway instance).

The gateway adds to the counts only after Kafka acknowledged the events, and publishes them as
cumulative records (format: docs/platform.md, "Formats shared between parts") so that a lost or
repeated audit record never changes the total: the latest record per key wins. The pipeline
compares the sum over instances with what landed in the lake: delivery checked against the
producer's own counts (docs/architecture.md, section 1).
"""

from __future__ import annotations

import threading
from collections import Counter
from datetime import datetime, timezone

import orjson


def audit_key(topic: str, hour: datetime, source: str) -> str:
    return f"{topic}|{_rfc3339(hour)}|{source}"


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class AuditCounts:
    """Cumulative accepted counts of one gateway instance; thread-safe."""

    def __init__(self, source: str) -> None:
        self.source = source
        self._counts: Counter[tuple[str, datetime]] = Counter()
        self._dirty: set[tuple[str, datetime]] = set()
        self._lock = threading.Lock()

    def add(self, topic: str, per_hour: Counter[datetime]) -> None:
        with self._lock:
            for hour, count in per_hour.items():
                self._counts[(topic, hour)] += count
                self._dirty.add((topic, hour))

    def total(self, topic: str) -> int:
        with self._lock:
            return sum(c for (t, _), c in self._counts.items() if t == topic)

    def take_changed(self, now: datetime) -> list[tuple[str, bytes]]:
        """(key, value) records for every count changed since the last call."""
        with self._lock:
            changed, self._dirty = self._dirty, set()
            snapshot = {k: self._counts[k] for k in changed}
        return [
            (audit_key(topic, hour, self.source), orjson.dumps({
                "topic": topic, "hour": _rfc3339(hour), "source": self.source,
                "count": count, "updated_at": _rfc3339(now),
            }))
            for (topic, hour), count in sorted(snapshot.items())
        ]

    def mark_all_changed(self) -> None:
        """After a failed publication: publish every count again (records are cumulative, so
        publishing one twice is harmless)."""
        with self._lock:
            self._dirty.update(self._counts)
