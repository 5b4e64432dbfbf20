"""The whole platform as one process tree, for tests/system: every process Conveyor runs (restartable,
and broken at will with SIGKILL and SIGSTOP), hostile but valid traffic through both data centres'
gateways with the SDK, and the ledger of what the gateways accepted."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import orjson

from conveyor_sdk.publisher import Publisher, PublishError
from tests.conftest import eventually, padded_to

#: Event times reach from this far back to the gateway's future tolerance (5 minutes), less a margin.
OLDEST = timedelta(days=7)
NEWEST = timedelta(minutes=4)
SITES = ("site-1", "sité-ünïcode-✓", "站点-二", "s")


@dataclass
class Proc:
    """One process of the platform, started again after a kill."""

    name: str
    argv: list[str]
    log: Path
    #: True once the process serves (None: as soon as it runs).
    ready: Callable[[], bool] | None = None
    process: subprocess.Popen | None = None

    def start(self, timeout: float = 180.0) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT)
        ready = self.ready
        if ready is None:
            return

        def up() -> bool:
            assert self.process is not None and self.process.poll() is None, \
                f"{self.name} exited: {self.log.read_text(errors='replace')[-3000:]}"
            return ready()

        eventually(up, timeout, f"{self.name} to be ready", interval=0.2)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def ended_on_its_own(self) -> str | None:
        """What a process that was started and then exited by itself left (None: it runs, or was
        never started): its exit status and its log's last line."""
        if self.process is None or self.process.poll() is None:
            return None
        lines = self.log.read_text(errors="replace").strip().splitlines()
        return f"{self.name} exited {self.process.returncode}: {lines[-1][:300] if lines else ''}"

    def kill(self) -> bool:
        """SIGKILL; True when it was running (the kill landed)."""
        if not self.alive():
            return False
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(60)
        return True

    def pause(self, seconds: float) -> bool:
        """SIGSTOP for ``seconds``, then SIGCONT; True when it was running."""
        if not self.alive():
            return False
        assert self.process is not None
        pause_pid(self.process.pid, seconds)
        return True

    def stop(self) -> None:
        if self.alive():
            assert self.process is not None
            self.process.send_signal(signal.SIGCONT)
            self.process.terminate()
            try:
                self.process.wait(90)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(30)


class Phases:
    """Seconds each phase of a long test took, printed with its outcome: where a slow run spent its
    time. ``mark(name)`` ends the phase ``name``, begun where the last one ended."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = time.monotonic()

    def mark(self, name: str) -> None:
        now = time.monotonic()
        self.seconds[name], self._last = round(now - self._last), now


def pause_pid(pid: int, seconds: float) -> None:
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        os.kill(pid, signal.SIGCONT)


def conveyor(*args: str) -> list[str]:
    return [sys.executable, "-m", "conveyor", *args]


def http_ready(url: str, verify: str | bool = True) -> Callable[[], bool]:
    """``verify``: the CA file an HTTPS server's certificate is checked against."""
    def ready() -> bool:
        try:
            return httpx.get(url, timeout=1, verify=verify).status_code == 200
        except httpx.HTTPError:
            return False
    return ready


@dataclass
class Ledger:
    """What the gateways answered 2xx for: every acceptance (a resend is one more) by event id."""

    events: dict[str, dict[str, Any]] = field(default_factory=dict)
    acceptances: Counter[str] = field(default_factory=Counter)
    #: The data centres each event id was accepted through.
    through: dict[str, set[str]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def accepted(self, dc: str, batch: list[dict[str, Any]]) -> None:
        with self.lock:
            for event in batch:
                self.events[event["event_id"]] = event
                self.acceptances[event["event_id"]] += 1
                self.through.setdefault(event["event_id"], set()).add(dc)

    @property
    def resent(self) -> set[str]:
        """Event ids accepted through both data centres."""
        return {event_id for event_id, dcs in self.through.items() if len(dcs) > 1}

    def per_hour(self) -> Counter[datetime]:
        """Events accepted per event hour (an event resent is one)."""
        hours: Counter[datetime] = Counter()
        for event in self.events.values():
            moment = datetime.fromisoformat(event["event_time"]).astimezone(timezone.utc)
            hours[moment.replace(minute=0, second=0, microsecond=0)] += 1
        return hours

    def write(self, path: Path, topic: str) -> None:
        with path.open("wb") as out:
            for event_id in self.events:
                out.write(orjson.dumps({"topic": topic, "event_id": event_id}) + b"\n")


class Generator:
    """Hostile but valid events through both gateways' SDKs, resending some through the other data
    centre later (same event, same id), until stopped."""

    def __init__(self, urls: dict[str, str], topic: str, token: str, limit: int, rng: random.Random,
                 ledger: Ledger, rate: float, ca: str | bool = True,
                 transports: dict[str, httpx.BaseTransport] | None = None) -> None:
        """``ca``: the CA file the gateways' certificates are checked against; ``transports``: per
        data centre, what carries the SDK's requests (a Service in front of a pool of gateways)."""
        self.urls, self.topic, self.token, self.limit, self.ledger, self.rate = urls, topic, token, limit, ledger, rate
        self.ca, self.transports = ca, transports or {}
        self.rngs = {dc: random.Random(rng.randrange(1 << 32)) for dc in urls}
        self.failures: list[BaseException] = []
        self._sent: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(dc,), daemon=True) for dc in urls]

    def event(self, rng: random.Random) -> dict[str, Any]:
        now = datetime.now(timezone.utc)
        roll = rng.random()
        if roll < 0.1:  # from a week ago to the future tolerance
            moment = now - OLDEST + (OLDEST + NEWEST) * rng.random()
        elif roll < 0.15:
            moment = now + NEWEST * rng.random()
        else:
            moment = now - timedelta(seconds=rng.uniform(0, 20))
        kind = rng.choice(("page_view", "impression", "impression", "click"))
        event: dict[str, Any] = {
            "event_id": str(uuid.UUID(int=rng.getrandbits(128), version=4)), "type": kind,
            "event_time": moment.isoformat(timespec=rng.choice(("seconds", "milliseconds", "microseconds"))),
            "site_id": rng.choice(SITES), "user_id": f"user-{rng.randrange(50)}", "category": rng.choice(("sport", "tr✈vel")),
        }
        if kind != "page_view":
            event |= {"banner_id": f"b-{rng.randrange(8)}", "price_micros": rng.choice((0, 1, 2**63 - 1, 1500))}
        if rng.random() < 0.004:  # the largest the gateway takes, key included
            return padded_to(event, self.limit)
        return event

    def _run(self, dc: str) -> None:
        rng = self.rngs[dc]
        other = next(d for d in self.urls if d != dc)
        try:
            with Publisher(self.urls[dc], self.token, max_attempts=200, backoff=0.1, max_backoff=2.0,
                           timeout=60, verify=self.ca, transport=self.transports.get(dc)) as publisher:
                while not self._stop.is_set():
                    batch = [self.event(rng) for _ in range(rng.randint(1, 20))]
                    with self.ledger.lock:
                        older = [e for e in self._sent[-2000:] if self.ledger.through[e["event_id"]] == {other}]
                    if older and rng.random() < 0.3:  # a client's retry through this data centre
                        batch += rng.sample(older, min(len(older), rng.randint(1, 3)))
                    publisher.publish(self.topic, batch)
                    self.ledger.accepted(dc, batch)
                    with self.ledger.lock:
                        self._sent.extend(batch)
                    time.sleep(len(batch) / self.rate)
        except PublishError as failure:
            self.failures.append(failure)

    def __enter__(self) -> Generator:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(300)
