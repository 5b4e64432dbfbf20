"""The import system of Spark's Python workers, kept from reading archives at every task.

Before each task PySpark calls ``importlib.invalidate_caches()``, and in Python 3.11 that has every
zip importer in ``sys.path_importer_cache`` read its archive's directory again: one importer for
each path entry and each package imported from an archive. A worker has three archives on its path:
pyspark.zip (1,328 entries, about 5 ms of a core to read, once per cached importer), py4j's, and
spark-core's jar (5,358 entries, about 22 ms), which Spark puts there for builds that carry
PySpark's Python inside it (a pip-installed PySpark's carries none). py-spy found a fifth of the
real-time job's worker time in those reads at 20,000 events/s.

A task's code calls :func:`forget_archives` first: the jars leave the path, and the zip importers
leave the cache, which is only a cache: an import that needs one makes it again from the directory
already in memory (``zipimport._zip_directory_cache``), so the next task reads only the archives
that its predecessor imported from for the first time.
"""

from __future__ import annotations

import sys
import zipimport


def forget_archives() -> None:
    """Drop the jars from this process's import path and every zip importer from its cache."""
    for entry in [p for p in sys.path if p.endswith(".jar")]:
        sys.path.remove(entry)
    for entry in [p for p, finder in sys.path_importer_cache.items() if isinstance(finder, zipimport.zipimporter)]:
        del sys.path_importer_cache[entry]
