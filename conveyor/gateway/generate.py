"""Realistic ad traffic for the demo and benchmarks: page views, impressions and clicks from many
sites, keyed by user, with banners and interest categories. Event synthesis is pure and seeded;
``run`` paces it through the gateway with :class:`~conveyor_sdk.publisher.Publisher`.

Each run takes a new seed unless given one: the seed decides the event ids, and the lake keeps one
event per id, so a second run with the same seed would be dropped as retries of the first."""

from __future__ import annotations

import math
import random
import secrets
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from conveyor_sdk.publisher import PublishError, Publisher

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
    #: Fields added to every event as they are (a field a new contract version brings).
    extra: dict[str, Any] = field(default_factory=dict)
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
        return {**event, **self.extra}


@dataclass(frozen=True)
class Pacing:
    """When each batch is due, and how many may await their answers at once. Pure.

    Batches go out on a fixed schedule (batch ``i`` at ``i * batch / rate`` seconds), not one after
    the other's answer: with one request in flight the rate is capped at ``batch / response time``
    (the demo asked for 2,000/s and got 606/s at a batch p99 of 1.7 s). A batch that falls behind its
    time goes at once, so a slow spell is caught up, up to ``in_flight`` requests awaiting answers."""

    rate: float
    batch: int
    in_flight: int

    def due(self, index: int) -> float:
        return index * self.batch / self.rate

    def batches(self, duration: float) -> int:
        """Batches in a run of ``duration`` seconds: the last one starts before its end."""
        return max(1, math.ceil(duration * self.rate / self.batch))

    def ceiling(self, response_seconds: float) -> float:
        """The most events/s ``in_flight`` requests can carry at this response time."""
        return self.in_flight * self.batch / response_seconds if response_seconds > 0 else math.inf


@dataclass(frozen=True)
class GenerateResult:
    sent: int
    accepted: int
    seconds: float
    batch_latencies: list[float]
    #: The rate asked for, and the pacing that carried it.
    pacing: Pacing | None = None
    #: Seconds a due batch waited for a request slot: the gateways' answers held the run back.
    slot_wait: float = 0.0
    #: Seconds this process spent making events (JSON-ready dicts): the client's own CPU.
    synthesis: float = 0.0
    failed: int = 0
    first_error: str | None = None
    #: Seconds from the start to the end of the last batch's turn: the answers to the last batches
    #: arrive after it, but they carry events sent within it. 0: ``seconds``.
    span: float = 0.0

    @property
    def rate(self) -> float:
        seconds = self.span or self.seconds
        return self.accepted / seconds if seconds else 0.0

    def quantile(self, q: float) -> float | None:
        ordered = sorted(self.batch_latencies)
        return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else None


#: Below this share of the asked rate a run says why it fell short.
REACHED = 0.95


def shortfall(result: GenerateResult) -> str | None:
    """One line saying why a run fell short of its rate, or None when it reached it. Pure."""
    pacing = result.pacing
    if pacing is None or result.rate >= REACHED * pacing.rate:
        return None
    head = f"reached {result.rate:,.0f} events/s of the {pacing.rate:,.0f}/s asked"
    if result.failed:
        return f"{head}: {result.failed} batch(es) failed ({result.first_error})"
    p50, p99 = result.quantile(0.5), result.quantile(0.99)
    if result.slot_wait > 0.1 * result.seconds and p50 is not None and p99 is not None:
        return (f"{head}: the gateways' answers limited it (batch p50 {p50:.2f} s, p99 {p99:.2f} s at "
                f"{pacing.in_flight} in flight carry about {pacing.ceiling(p50):,.0f}/s); "
                f"raise --in-flight or --batch, or add gateways")
    if result.synthesis > 0.5 * result.seconds:
        per_batch = 1000 * result.synthesis / max(1, result.sent // pacing.batch)
        return (f"{head}: this process could not make events fast enough ({per_batch:.1f} ms per batch of "
                f"{pacing.batch}, {result.synthesis:.1f} s of {result.seconds:.1f} s); run more generators")
    return (f"{head}: neither the gateways' answers nor making events held it back "
            f"(waited {result.slot_wait:.1f} s for a slot, made events for {result.synthesis:.1f} s); "
            f"the machine was busy")


def run(publishers: list[Publisher], topic: str, rate: float, duration: float, batch: int = 100,
        traffic: AdTraffic | None = None, progress: Callable[[int, int], None] | None = None,
        in_flight: int = 16) -> GenerateResult:
    """Send ``rate`` events/s for ``duration`` s in batches, round-robin over the gateways, with up
    to ``in_flight`` requests awaiting answers (httpx's client is safe to share between threads)."""
    traffic = traffic or AdTraffic()
    pacing = Pacing(rate, batch, in_flight)
    slots = threading.BoundedSemaphore(in_flight)
    lock = threading.Lock()
    latencies: list[float] = []
    totals = {"accepted": 0, "failed": 0}
    errors: list[str] = []
    expected = pacing.batches(duration) * batch

    def send(publisher: Publisher, events: list[dict[str, Any]]) -> None:
        try:
            result = publisher.publish(topic, events)
        except PublishError as err:
            with lock:
                totals["failed"] += 1
                errors.append(str(err))
        else:
            with lock:
                totals["accepted"] += result.accepted
                latencies.append(result.seconds)
        finally:
            slots.release()

    started = time.monotonic()
    sent, slot_wait, synthesis, last = 0, 0.0, 0.0, started
    with ThreadPoolExecutor(max_workers=in_flight, thread_name_prefix="generate") as pool:
        for index in range(pacing.batches(duration)):
            ahead = started + pacing.due(index) - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
            waited = time.monotonic()
            slots.acquire()
            slot_wait += time.monotonic() - waited
            made = time.monotonic()
            events = [traffic.event() for _ in range(batch)]
            synthesis += time.monotonic() - made
            pool.submit(send, publishers[index % len(publishers)], events)
            last = time.monotonic()
            sent += len(events)
            if progress:
                progress(totals["accepted"], expected)
    seconds = time.monotonic() - started
    if progress:
        progress(totals["accepted"], expected)
    span = max(pacing.due(pacing.batches(duration)), last - started + batch / rate)
    return GenerateResult(sent, totals["accepted"], seconds, latencies, pacing, slot_wait, synthesis,
                          totals["failed"], errors[0] if errors else None, span)
