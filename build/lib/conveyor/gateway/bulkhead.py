"""Per-topic bulkheads: request queues split per topic hash that fail fast when full, so one slow
topic cannot hang the whole service (docs/architecture.md, section 1).

Topics hash into lanes; each lane has its own worker budget (requests writing at once) and a
bounded wait queue. A request that finds its lane full is refused at once with 503 and
Retry-After instead of waiting behind a topic whose brokers are slow.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from conveyor.gateway.errors import Overloaded


@dataclass
class Lane:
    index: int
    workers: asyncio.Semaphore
    capacity: int
    #: Requests in the lane: writing or waiting for a worker.
    occupied: int = 0


class Bulkheads:
    def __init__(self, lanes: int = 16, workers_per_lane: int = 4, queue_per_lane: int = 32,
                 retry_after: int = 1) -> None:
        self._lanes = [Lane(i, asyncio.Semaphore(workers_per_lane), workers_per_lane + queue_per_lane)
                       for i in range(lanes)]
        self._retry_after = retry_after

    def lane_of(self, topic: str) -> Lane:
        return self._lanes[zlib.crc32(topic.encode()) % len(self._lanes)]

    def occupancy(self) -> dict[int, int]:
        return {lane.index: lane.occupied for lane in self._lanes}

    @asynccontextmanager
    async def enter(self, topic: str) -> AsyncIterator[Lane]:
        lane = self.lane_of(topic)
        if lane.occupied >= lane.capacity:
            raise Overloaded(f"topic {topic} is overloaded ({lane.occupied} requests in its lane); retry later",
                             retry_after=self._retry_after, topic=topic)
        lane.occupied += 1
        try:
            async with lane.workers:
                yield lane
        finally:
            lane.occupied -= 1
