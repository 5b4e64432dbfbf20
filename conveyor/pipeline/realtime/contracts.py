"""The views' contracts as the registry holds them, for the plan the job's tasks parse records by.

A record names, in its contract header, the version the gateway checked it against; the tasks parse
it by that version. A version is registered before any record of it is accepted, so a registry read
to its end after a record was written holds the record's version, or the version never existed:

- a micro-batch reads the registry to its end before each batch (the batch's offsets are fixed by
  then), so a version its plan lacks is one the registry never held, and the record is rejected;
  a replay decides the same, since versions are only ever added;
- real-time tasks run with the plan of their query's start: a record of a version newer than the
  plan stops the task (:class:`~conveyor.pipeline.realtime.deltas.ContractBehindError`), and the
  driver reads the registry again and starts the query over (the fences make that safe).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping

from conveyor.bus.registry import Registry, RegistryMissing, RegistryUnavailable
from conveyor.bus.registry_state import Version
from conveyor.config import Platform, RealtimeView
from conveyor.pipeline.realtime.deltas import BatchPlan, TopicPlan
from conveyor.pipeline.realtime.plan import ViewPlan, job_id
from conveyor.pipeline.schema import contract_columns, read_schema, versions_columns

log = logging.getLogger("conveyor.realtime")

#: How long a batch waits for the registry to answer (its cluster is the one the job reads; a broker
#: restart there stalls both) before the batch fails.
REGISTRY_PATIENCE = 300.0


def topic_plan(platform: Platform, topic: str, versions: list[Version]) -> TopicPlan:
    """A topic's contract as the tasks get it: every version the registry holds (columns of all of
    them, the latest's kinds first), or platform.yaml's file where the registry holds none."""
    if not versions:
        schema = read_schema(platform, topic)
        return TopicPlan(topic, json.dumps(schema, sort_keys=True), contract_columns(topic, schema))
    return TopicPlan(topic, versions[-1].schema, versions_columns(topic, [v.parsed for v in versions]),
                     tuple((v.version, v.id, v.schema) for v in versions))


class ViewContracts:
    """The registry followed for the views' topics; no registry (no contracts topic declared):
    platform.yaml's contract files."""

    def __init__(self, platform: Platform, views: Mapping[str, RealtimeView]) -> None:
        self.platform = platform
        self.views = views
        self.topics = sorted({v.topic for v in views.values()})
        self._registry: Registry | None = None
        self._read_at = -1
        if platform.contracts.topic in platform.topics:
            self._registry = Registry(platform, f"conveyor-realtime-{job_id(views)}")
            # Followed, then waited for with the same patience as before each batch: a broker of
            # central down at the job's start is waited out, not a failed start.
            self._registry.follow()
        self.plan = self._plan({})
        self.caught_up()

    def _plan(self, versions: Mapping[str, list[Version]], read_ms: int | None = None) -> BatchPlan:
        plans = tuple(ViewPlan.of(name, view) for name, view in self.views.items())
        return BatchPlan(tuple(topic_plan(self.platform, t, list(versions.get(t, ()))) for t in self.topics),
                         plans, (None,) * len(plans), round(self.platform.pipeline.realtime.future_tolerance * 1000),
                         read_ms)

    def caught_up(self, live: bool = False) -> BatchPlan:
        """The plan with every version the registry holds now (read to its end first); ``live``:
        for real-time tasks, which stop on a record of a version registered after this read."""
        registry = self._registry
        if registry is None:
            return self.plan
        deadline = time.monotonic() + REGISTRY_PATIENCE
        while True:
            asked_ms = time.time_ns() // 1_000_000  # before the end is asked: what it holds was registered by then
            try:
                registry.wait_caught_up()
                break
            except RegistryMissing:
                break
            except RegistryUnavailable as err:
                if time.monotonic() >= deadline:
                    raise
                log.warning("%s; trying again", err)
        read_ms = asked_ms if live else None
        if registry.position != self._read_at or self.plan.versions_read_ms != read_ms:
            with registry.reading() as state:
                self._read_at = registry.position
                self.plan = self._plan({t: state.versions(f"{t}-value") for t in self.topics}, read_ms)
        return self.plan

    def close(self) -> None:
        if self._registry is not None:
            self._registry.stop()
