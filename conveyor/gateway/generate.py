"""Realistic ad traffic for the demo and benchmarks: page views, impressions and clicks from many
sites, keyed by user, with banners and interest categories. Event synthesis is pure and seeded;
``run`` paces it through the gateway with :class:`~conveyor.gateway.client.Publisher`.

Each run takes a new seed unless given one: the seed decides the event ids, and the lake keeps one
event per id, so a second run with the same seed would be dropped as retries of the first."""

from __future__ import annotations

import random
import secrets
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from conveyor.gateway.client import Publisher

CATEGORIES = ("sports", "travel", "autos", "finance", "fashion", "games", "food", "tech")
# Of every 100 events: a page view leads to impressions, a few of which are clicked (CTR ~2-5 %).
MIX = (("page_view", 30), ("impression", 67), ("click", 3))


def new_seed() -> int:
    """A seed no earlier run is likely to have used: 48 random bits from the OS (a one-in-a-million
    chance of a repeat only after some 24,000 runs into the same lake)."""
    return secrets.randbits(48)


@dataclass
class AdTraffic:
    #: The same seed gives the same events (event ids included), timestamps apart.
    seed: int = field(default_factory=new_seed)
    sites: int = 200
    users: int = 50_000
    banners: int = 2_000
    _random: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)
        self._types = [kind for kind, weight in MIX for _ in range(weight)]

    def event(self, now: datetime | None = None) -> dict[str, Any]:
        r = self._random
        kind = r.choice(self._types)
        moment = now or datetime.now(timezone.utc)
        # Popular sites and users get more traffic, as in real ad logs (Pareto-ish skew).
        event: dict[str, Any] = {
            "event_id": str(uuid.UUID(int=r.getrandbits(128), version=4)),
            "event_time": moment.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "type": kind,
            "site_id": f"site-{min(int(r.paretovariate(1.2)), self.sites)}",
            "user_id": f"user-{r.randrange(self.users)}",
            "category": r.choice(CATEGORIES),
        }
        event["page_url"] = (f"https://{event['site_id']}.example/{event['category']}/"
                             f"article-{r.randrange(100_000)}?ref=feed&utm_source=partner-{r.randrange(50)}")
        if kind != "page_view":
            event["banner_id"] = f"banner-{min(int(r.paretovariate(1.1)), self.banners)}"
            event["price_micros"] = r.randrange(100, 5_000)
        return event


@dataclass(frozen=True)
class GenerateResult:
    sent: int
    accepted: int
    seconds: float
    batch_latencies: list[float]

    @property
    def rate(self) -> float:
        return self.accepted / self.seconds if self.seconds else 0.0


def run(publishers: list[Publisher], topic: str, rate: float, duration: float, batch: int = 100,
        traffic: AdTraffic | None = None, progress: Callable[[int, int], None] | None = None) -> GenerateResult:
    """Send ``rate`` events/s for ``duration`` s in batches, round-robin over the gateways."""
    traffic = traffic or AdTraffic()
    started = time.monotonic()
    sent = accepted = 0
    latencies: list[float] = []
    turn = 0
    while (elapsed := time.monotonic() - started) < duration:
        due = int(rate * elapsed) + batch
        if sent >= due:
            time.sleep(min(0.01, batch / rate))
            continue
        events = [traffic.event() for _ in range(batch)]
        result = publishers[turn % len(publishers)].publish(topic, events)
        turn += 1
        sent += len(events)
        accepted += result.accepted
        latencies.append(result.seconds)
        if progress:
            progress(accepted, int(rate * duration))
    return GenerateResult(sent, accepted, time.monotonic() - started, latencies)
