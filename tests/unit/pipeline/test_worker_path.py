"""Spark's Python workers drop the jars Spark puts on their path, so that PySpark's
``importlib.invalidate_caches()`` before each task reads no jar's directory again."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import zipfile

CHILD = """
import importlib, sys, zipimport
reads = []
real = zipimport.zipimporter.invalidate_caches
zipimport.zipimporter.invalidate_caches = lambda self: (reads.append(self.archive), real(self))[1]
try:
    import not_a_module_anywhere  # the import system visits every path entry and caches its importer
except ImportError:
    pass
importlib.invalidate_caches()  # what PySpark calls before each task
before = list(reads)
from conveyor.pipeline.worker_path import drop_jars
drop_jars()
reads.clear()
importlib.invalidate_caches()
print(repr((before, reads, [p for p in sys.path if p.endswith('.jar')])))
"""


def test_a_worker_reads_no_jar_at_its_tasks_once_it_dropped_them(tmp_path):
    jar = tmp_path / "spark-core.jar"
    with zipfile.ZipFile(jar, "w") as archive:
        archive.writestr("org/apache/spark/SparkContext.class", b"\xca\xfe\xba\xbe")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(jar), *sys.path])}
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    before, after, left = ast.literal_eval(out.stdout)
    assert before == [str(jar)]  # the cost the worker had
    assert after == [] and left == []
