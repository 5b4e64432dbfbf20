"""The import path of Spark's Python workers, cleared of what costs them at every task.

Spark starts every Python worker with its core jar on ``PYTHONPATH`` (``PythonUtils.sparkPythonPath``
names the jar that carries PySpark's Python in some builds of Spark; a pip-installed PySpark's carries
none). Before each task PySpark calls ``importlib.invalidate_caches()``, and in Python 3.11 that has
every zip importer read its archive's directory again: the 5,358 entries of spark-core's jar took
about 22 ms of a core per task on an idle machine, and py-spy found a fifth of the real-time job's
worker time there at 20,000 events/s. Nothing is imported from a jar, so a worker drops them from its
path at its first task and keeps its other tasks from reading them.
"""

from __future__ import annotations

import sys
from functools import cache


@cache
def drop_jars() -> None:
    """Remove every ``.jar`` from this process's import path and its importer cache; later calls do
    nothing (Spark reuses a Python worker for many tasks)."""
    for entry in [p for p in sys.path if p.endswith(".jar")]:
        sys.path.remove(entry)
    for entry in [p for p in sys.path_importer_cache if p.endswith(".jar") or ".jar/" in p]:
        del sys.path_importer_cache[entry]
