"""Garbage-collector settings for the services that handle every event in Python.

The gateway, the dispatcher and the real-time job allocate several container objects per event (parsed dicts,
delivery callbacks, partial sums), so at CPython's default threshold (700 net allocations)
the cyclic collector runs every few dozen events, and its older generations walk every object the
process loaded at start (FastAPI, pydantic, PySpark). Under load py-spy put about a fifth of the
gateway's time in the collector. Reference counting frees these objects anyway; the collector is
there for cycles, which the hot paths do not make.
"""

from __future__ import annotations

import gc
from functools import cache

#: A young-generation collection every this many net allocations (CPython's default: 700).
YOUNG_THRESHOLD = 50_000


@cache
def tune_for_throughput() -> None:
    """Call once the service has loaded what it keeps for its life: that is moved out of the
    collector's sight (``gc.freeze``), and collections become rarer. Later calls do nothing, so a
    Spark task may call it on a reused Python worker without collecting again."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
