"""A Spark standalone cluster on this machine: a master and one worker, each its own JVM started
from the installed PySpark's ``spark-class``, on 127.0.0.1. The worker starts each application's
executor as its child JVM, and the executor its Python workers.

The tests run the pipelines on it (tests/sparkkit.py) and so does the cluster benchmark
(bench/spark_cluster.py); docs/realtime.md, "Running on your cluster", gives the same two commands
by hand. Not part of ``conveyor up``: a real cluster is the data team's, named by
``pipeline.spark.master``.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from conveyor.runtime.errors import NodeFailedError, StartTimeoutError

#: What the executor's JVM runs: the worker's children with it in their command line are executors.
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


@dataclass(frozen=True)
class StandaloneSettings:
    folder: Path
    #: The master's port; its UI, the worker and the worker's UI take the next three.
    port: int
    #: What the worker offers its executors.
    cores: int = 1
    memory: str = "1g"
    #: Heap of the master and the worker themselves.
    daemon_memory: str = "256m"
    start_timeout: float = 120.0


def _without_pythonpath() -> dict[str, str]:
    # The worker stands for another host: its Python workers get only what Spark ships them.
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


class StandaloneCluster:
    """``start()`` runs the master, then the worker once the master leads; ``stop()`` ends both."""

    def __init__(self, settings: StandaloneSettings) -> None:
        self.settings = settings
        self._daemons: list[subprocess.Popen] = []

    @property
    def master(self) -> str:
        return f"spark://127.0.0.1:{self.settings.port}"

    @property
    def work_dir(self) -> Path:
        """The worker's folder: one app-<id> folder per application that ran executors here."""
        return self.settings.folder / "work"

    @property
    def worker_pid(self) -> int:
        return self._daemons[1].pid

    def start(self) -> None:
        import pyspark

        folder, port = self.settings.folder, self.settings.port
        folder.mkdir(parents=True, exist_ok=True)
        home = Path(pyspark.__file__).parent
        spark_class = str(home / "bin" / "spark-class")
        env = {**_without_pythonpath(), "SPARK_HOME": str(home), "SPARK_DAEMON_MEMORY": self.settings.daemon_memory,
               "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_NO_DAEMONIZE": "1"}
        try:
            self._run([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
                       str(port), "--webui-port", str(port + 1)], "master", env, "I have been elected leader")
            self._run([spark_class, "org.apache.spark.deploy.worker.Worker", self.master, "--host", "127.0.0.1",
                       "--port", str(port + 2), "--webui-port", str(port + 3), "--cores", str(self.settings.cores),
                       "--memory", self.settings.memory, "--work-dir", str(self.work_dir)],
                      "worker", env, "Successfully registered with master")
        except BaseException:
            self.stop()
            raise

    def _run(self, argv: list[str], name: str, env: dict[str, str], ready: str) -> None:
        log = self.settings.folder / f"{name}.log"
        with log.open("ab") as out:
            # spark-class execs the JVM: the pid is the daemon's, and its group holds its executors.
            process = subprocess.Popen(argv, stdout=out, stderr=out, env=env, cwd=self.settings.folder,
                                       start_new_session=True)
        self._daemons.append(process)
        deadline = time.monotonic() + self.settings.start_timeout
        while ready not in log.read_text(errors="replace"):
            if process.poll() is not None:
                raise NodeFailedError(f"the Spark {name} exited ({process.returncode}): "
                                      f"{log.read_text(errors='replace')[-2000:]}")
            if time.monotonic() > deadline:
                raise StartTimeoutError(f"the Spark {name} did not start within {self.settings.start_timeout:g} s; "
                                        f"see {log}")
            time.sleep(0.2)

    def executor_pids(self) -> list[int]:
        """The executors' JVMs running now (the worker's children)."""
        worker = str(self.worker_pid)
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:  # ended meanwhile
                continue
            # The command (field 2) may hold spaces; the parent's pid is the second field after it.
            parent = stat.rsplit(")", 1)[1].split()[1]
            if parent == worker and EXECUTOR_CLASS.encode() in cmdline:
                found.append(int(entry.name))
        return sorted(found)

    def stop(self) -> None:
        """SIGTERM each daemon's process group (the worker's executors with it), SIGKILL after 30 s."""
        for process in reversed(self._daemons):
            try:
                os.killpg(process.pid, 15)
                process.wait(30)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, 9)
                process.wait()
        self._daemons.clear()

    def __enter__(self) -> StandaloneCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
