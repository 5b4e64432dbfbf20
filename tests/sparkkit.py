"""A Spark standalone cluster for the tests: a master and one worker, each its own JVM from the
installed PySpark, on 127.0.0.1; the worker starts the executor, and the executor its Python workers.

Those Python workers must not reach this checkout or its environment, so that the jobs prove they
ship ``conveyor`` and what it imports (conveyor.pipeline.shipping):

- Their interpreter is a virtual environment made here (``python -m venv --without-pip``, about a
  second) with nothing but the standard library: no ``conveyor``, no orjson, no pyarrow, which the
  fixture checks. PySpark is not there either: the worker puts the Spark installation's
  ``pyspark.zip`` on its Python workers' path, as on a real cluster.
- The worker runs in a folder of the test's temporary directory, without PYTHONPATH.

The daemons are conveyor.runtime.spark_standalone's (the cluster benchmark starts the same).
Ports: base_port + 470 (master), + 471 (its UI), + 472 (worker), + 473 (its UI); daemons with
256 MiB heaps (SPARK_DAEMON_MEMORY), a worker of one core and 1 GiB for its executor.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from conveyor.config import Platform
from conveyor.runtime.spark_standalone import StandaloneCluster, StandaloneSettings
from tests.conftest import platform_variant

#: Master, master UI, worker, worker UI: base_port + this and the next three.
SPARK_OFFSET = 470
#: The running cluster by port: a module importing the fixture instantiates it again, and the first
#: instance's cluster serves them all (it stops at the session's end).
_RUNNING: dict[int, SparkCluster] = {}


def executor_python(folder: Path) -> Path:
    """A Python with nothing but the standard library (see the module's doc)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    for module in ("conveyor", "orjson", "pyarrow"):
        alone = subprocess.run([str(python), "-c", f"import {module}"], capture_output=True, text=True,
                               cwd=folder, env=_without_pythonpath())
        assert f"No module named '{module}'" in alone.stderr, f"the executors' Python must not find {module} by itself"
    return python


def _without_pythonpath() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


@dataclass(frozen=True)
class SparkCluster:
    master: str
    #: What a platform file's pipeline.spark needs to run its jobs there.
    settings: dict[str, Any]
    #: The running master and worker (their executors: ``daemons.executor_pids()``).
    daemons: StandaloneCluster

    @property
    def work_dir(self) -> Path:
        return self.daemons.work_dir

    def applications(self) -> list[Path]:
        return sorted(self.work_dir.glob("app-*"))


def on_cluster(path: Path, cluster: SparkCluster) -> Platform:
    """The platform file, rewritten so that its pipelines run on ``cluster``."""
    data = yaml.safe_load(path.read_text())
    data["pipeline"]["spark"] = {**data["pipeline"].get("spark", {}), **cluster.settings}
    return platform_variant(data, path)


@pytest.fixture(scope="session")
def spark_cluster(platform: Platform, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    port = platform.runtime.base_port + SPARK_OFFSET
    if port in _RUNNING:
        yield _RUNNING[port]
        return
    folder = tmp_path_factory.mktemp("spark-cluster")
    python = executor_python(folder / "executor-python")
    daemons = StandaloneCluster(StandaloneSettings(folder, port))
    with daemons:
        _RUNNING[port] = SparkCluster(daemons.master, {"master": daemons.master, "driver_host": "127.0.0.1",
                                                       "driver_bind_address": "127.0.0.1",
                                                       "executor_python": str(python)}, daemons)
        try:
            yield _RUNNING[port]
        finally:
            _RUNNING.pop(port, None)
