"""Spark's Python workers forget the archives on their import path at each task, so that PySpark's
``importlib.invalidate_caches()`` before the next task reads no archive's directory again."""

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
import zipped  # a package from the zip, as pyspark is from pyspark.zip in a worker
try:
    import not_a_module_anywhere  # the import system visits every path entry and caches its importer
except ImportError:
    pass
importlib.invalidate_caches()  # what PySpark calls before each task
before = sorted(set(reads))
from conveyor.pipeline.worker_path import forget_archives
forget_archives()
reads.clear()
importlib.invalidate_caches()
after = list(reads)
import zipped.later  # the zip still serves what was not imported yet
print(repr((before, after, [p for p in sys.path if p.endswith('.jar')], zipped.later.VALUE)))
"""


def test_a_worker_reads_no_archive_at_its_next_task_and_still_imports_from_them(tmp_path):
    jar, zipped = tmp_path / "spark-core.jar", tmp_path / "pyspark.zip"
    with zipfile.ZipFile(jar, "w") as archive:
        archive.writestr("org/apache/spark/SparkContext.class", b"\xca\xfe\xba\xbe")
    with zipfile.ZipFile(zipped, "w") as archive:
        archive.writestr("zipped/__init__.py", "")
        archive.writestr("zipped/later.py", "VALUE = 7\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(zipped), str(jar), *sys.path])}
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    before, after, jars_left, value = ast.literal_eval(out.stdout)
    assert before == sorted([str(jar), str(zipped)])  # the cost a worker had at every task
    assert (after, jars_left, value) == ([], [], 7)
