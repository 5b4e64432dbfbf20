"""Reading the views: a key's counters over windows, with ratios (CTR) computed on read.

    from conveyor.pipeline.realtime.views import read_view, recent_windows
    read_view(platform, "banner_ctr", ["banner-7"], recent_windows(platform, "banner_ctr", 5))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import redis

from conveyor.config import Platform, RealtimeView
from conveyor.pipeline.realtime.plan import RealtimeConfigError, ViewPlan, epoch_ms, is_counter, job_views
from conveyor.pipeline.realtime.store import connect


@dataclass(frozen=True)
class WindowCounters:
    window_start: datetime
    key: str
    #: Hash field -> value (``<metric>`` or ``<metric>:<value of a group-by field outside the key>``).
    counters: dict[str, int]
    #: ``<ratio>`` (or ``<ratio>:<value>``) -> numerator / denominator; None where the denominator is 0.
    ratios: dict[str, float | None]


def _view(platform: Platform, name: str) -> tuple[RealtimeView, ViewPlan]:
    view = job_views(platform, [name])[name]
    return view, ViewPlan.of(name, view)


def window_of(platform: Platform, view_name: str, moment: datetime) -> datetime:
    """The start of the view's window that holds ``moment`` (naive times are UTC)."""
    _, plan = _view(platform, view_name)
    moment = moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
    start_ms = plan.window_start(epoch_ms(moment))
    return datetime.fromtimestamp(start_ms / 1000, timezone.utc)


def recent_windows(platform: Platform, view_name: str, count: int, now: datetime | None = None) -> list[datetime]:
    """The ``count`` latest windows of the view, the current one first."""
    view, _ = _view(platform, view_name)
    current = window_of(platform, view_name, now or datetime.now(timezone.utc))
    return [current - timedelta(seconds=view.window * i) for i in range(count)]


def _ratios(view: RealtimeView, counters: dict[str, int]) -> dict[str, float | None]:
    ratios: dict[str, float | None] = {}
    for name, (numerator, denominator) in view.ratios.items():
        suffixes = {f.partition(":")[2] for f in counters if f.partition(":")[0] in (numerator, denominator)}
        for suffix in sorted(suffixes):
            tail = f":{suffix}" if suffix else ""
            over = counters.get(denominator + tail, 0)
            ratios[name + tail] = counters.get(numerator + tail, 0) / over if over else None
    return ratios


def read_view(platform: Platform, view_name: str, key: Sequence[str], windows: Sequence[datetime],
              client: redis.Redis | None = None) -> list[WindowCounters]:
    """The counters of ``key`` (the values of the view's key fields, in the key's order) in each of
    ``windows`` that has any."""
    view, plan = _view(platform, view_name)
    fields = view.key_fields
    if len(key) != len(fields):
        raise RealtimeConfigError(f"view {view_name} is keyed by {', '.join(fields)}: give {len(fields)} value(s)")
    values = dict(zip(fields, key, strict=True))
    client = client or connect(platform, reader=True)
    starts = [window_of(platform, view_name, w) for w in windows]
    keys = [plan.key(values, epoch_ms(start)) for start in starts]
    pipe = client.pipeline(transaction=False)
    for k in keys:
        pipe.hgetall(k)
    found = []
    for start, k, fields_found in zip(starts, keys, pipe.execute(), strict=True):
        counters = {f: int(v) for f, v in sorted(fields_found.items()) if is_counter(f)}
        if counters:
            found.append(WindowCounters(start, k, counters, _ratios(view, counters)))
    return found
