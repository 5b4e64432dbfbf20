"""The one place a Spark session is built, so every pipeline runs the same pinned engine.

Versions are pinned together: PySpark from PyPI, and from Maven Central (through pom.xml beside
this module) the Kafka connector of the same Spark version and the Iceberg runtime built for that
Spark line. Maven resolves them once; later starts reuse the cached file list without Maven or the
network. The jars reach the session as ``spark.jars``, which Spark also serves to executors on
other hosts. The JVM's console (Spark's warnings) goes to a log file under the runtime home rather
than over the CLI's output.
"""

from __future__ import annotations

import os
import re
import socket
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conveyor.config import Platform
from conveyor.jars import maven_classpath
from conveyor.pipeline.catalog import catalog_conf, require_catalog
from conveyor.pipeline.errors import SparkSetupError
from conveyor.pipeline.object_store import S3_JARS, needs_s3, s3a_conf
from conveyor.pipeline.shipping import executor_env, ship

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SPARK_VERSION = "4.1.1"
#: The connector and the Iceberg runtime, with the versions pom.xml pins beside PySpark's.
POM = Path(__file__).with_name("pom.xml")
#: Settings that take effect only when Spark launches its JVM, which spark-submit does itself.
_LAUNCH_SETTINGS = ("spark.master", "spark.driver.memory")


def _pyspark_artifacts() -> set[str]:
    """The artifact ids of the jars PySpark ships (``scala-library-2.13.17.jar``: scala-library)."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    return {re.sub(r"-\d[^-]*(-[A-Za-z]\w*)?\.jar$", "", jar.name) for jar in jars.glob("*.jar")}


def pipeline_jars() -> list[str]:
    """The connector and Iceberg jars with what they need that PySpark does not already ship.

    Its own copies of Hadoop's client, Scala and SLF4J win: a second, older SLF4J API beside them
    would only be shipped to every executor and shadowed."""
    shipped = _pyspark_artifacts()
    # A Maven repository keeps a jar at <group path>/<artifact>/<version>/<file>.
    return [jar for jar in maven_classpath(POM, "Spark's Kafka connector and Iceberg runtime")
            if Path(jar).parents[1].name not in shipped]


#: Spark's default V1 sources (spark.sql.sources.useV1SourceList) less Kafka.
V1_SOURCES = ("avro", "csv", "json", "orc", "parquet", "text")


def session_jars(platform: Platform) -> list[str]:
    """The pipelines' jars a session of ``platform`` needs."""
    on_s3 = needs_s3(platform)
    return [jar for jar in pipeline_jars() if on_s3 or Path(jar).parents[1].name not in S3_JARS]


def session_conf(platform: Platform, app_name: str, jars: list[str]) -> dict[str, str]:
    """Every setting of a pipeline session; static ones only take effect before the JVM starts."""
    spark = platform.pipeline.spark
    return {
        "spark.master": spark.master,
        "spark.app.name": app_name,
        "spark.driver.memory": spark.driver_memory,
        "spark.jars": ",".join([*jars, *spark.jars]),
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        **catalog_conf(platform),
        **s3a_conf(platform),
        "spark.sql.session.timeZone": "UTC",
        # Streaming reads of Kafka through the connector's first (V1) source. The V2 source of
        # Spark 4.1.1 fails a query that replays its last uncommitted batch after a restart: its
        # progress metrics dereference offsets only a new batch sets (SPARK-55271, a
        # NullPointerException in KafkaMicroBatchStream.metrics), and replaying is exactly how
        # the real-time job recovers from a kill. The V1 source reads the same offsets into the
        # same checkpoint format and reports no such metrics.
        "spark.sql.streaming.disabledV2MicroBatchReaders": "org.apache.spark.sql.kafka010.KafkaSourceProvider",
        # Batch reads of Kafka (the lake's range, verify's audit) through the connector's V2 source:
        # Spark's default list sends "kafka" to its V1 relation, which turns every record into an
        # external Row and back, the value and headers copied twice (a sixth of the lake's CPU).
        "spark.sql.sources.useV1SourceList": ",".join(V1_SOURCES),
        "spark.sql.shuffle.partitions": str(spark.shuffle_partitions),
        # No console progress bar over our own.
        "spark.ui.showConsoleProgress": "false",
        **(_local_conf() if is_local_master(spark.master) else _cluster_conf(platform)),
        **({"spark.jars.packages": ",".join(spark.packages)} if spark.packages else {}),
        **{key: value.get_secret_value() for key, value in spark.conf.items()},
    }


def is_local_master(master: str) -> bool:
    return master == "local" or master.startswith("local[")


def _local_conf() -> dict[str, str]:
    # One machine: the driver on loopback only, and no web UI (a port per job, memory).
    return {"spark.ui.enabled": "false", "spark.driver.bindAddress": "127.0.0.1", "spark.driver.host": "127.0.0.1"}


def _cluster_conf(platform: Platform) -> dict[str, str]:
    # Executors on other hosts connect back to the driver: it listens where the settings say (Spark's
    # default, the host's name, when they say nothing), and its UI stays on for the cluster's operators.
    spark = platform.pipeline.spark
    return {**executor_env(), **{key: value for key, value in (("spark.driver.host", spark.driver_host),
                                                             ("spark.driver.bindAddress", spark.driver_bind_address))
                                 if value}}


def require_reachable_master(master: str, timeout: float) -> None:
    """Fail at once, naming the master, when a standalone or Kubernetes master does not accept a
    connection within ``timeout``: Spark itself would retry for minutes, or hang, before it says so."""
    match = re.match(r"^(?:spark://|k8s://(?:https?://)?)([^/,:]+):(\d+)", master)
    if match is None:  # local[N], yarn (its address comes from the Hadoop configuration)
        return
    host, port = match.group(1), int(match.group(2))
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as err:
        raise SparkSetupError(f"Spark master {master} did not answer within {timeout:g} s ({err}); check "
                              "pipeline.spark.master and that the master runs") from None


def spark_log(platform: Platform) -> Path:
    return platform.home / "logs" / "spark.log"


@contextmanager
def _console_to(path: Path) -> Iterator[None]:
    """Point this process's stdout and stderr at ``path`` while the JVM is launched: the JVM
    inherits them for its whole life, and ours are restored afterwards."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with path.open("ab") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])


def _shipped(session: SparkSession, platform: Platform) -> SparkSession:
    """The session, with ``conveyor`` and its executor side's dependencies shipped to its executors
    when they may run on other hosts (under ``local[N]`` they are this process's JVM and start this
    interpreter)."""
    if not is_local_master(session.sparkContext.master):
        ship(session, platform.home / "spark")
    return session


def spark_session(platform: Platform, app_name: str = "conveyor") -> SparkSession:
    """A Spark session with the Kafka connector and the platform's Iceberg catalog.

    In one process every pipeline shares one session (Spark allows one JVM per process); asking
    for another warehouse than the running session's is an error rather than a silent mix.
    """
    import pyspark
    from pyspark.errors import PySparkException
    from pyspark.sql import SparkSession

    if pyspark.__version__ != SPARK_VERSION:
        raise SparkSetupError(
            f"PySpark {pyspark.__version__} is installed but the pipelines pin Spark {SPARK_VERSION} "
            "with jars of that version; reinstall with `pip install -e .`"
        )
    # Under spark-submit the JVM runs already: its --master, --driver-memory and --jars decide.
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    conf = session_conf(platform, app_name, [] if submitted else session_jars(platform))
    if submitted:
        conf = {k: v for k, v in conf.items() if k not in _LAUNCH_SETTINGS and not k.startswith("spark.jars")}
    active = SparkSession.getActiveSession()
    if active is not None:
        require_catalog(active, platform)
        return active

    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    if submitted:
        return _shipped(builder.getOrCreate(), platform)
    settings = platform.pipeline.spark
    require_reachable_master(settings.master, settings.master_timeout)
    if is_local_master(settings.master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # PySpark starts every Python worker, on any host, with the interpreter this variable names.
    # Here that is this one (conveyor installed); a cluster's executors get the code shipped and
    # run the interpreter the settings name, else PYSPARK_PYTHON as given, else Spark's python3.
    python = sys.executable if is_local_master(settings.master) else settings.executor_python
    if python:
        os.environ["PYSPARK_PYTHON"] = python
    log = spark_log(platform)
    try:
        with _console_to(log):
            session = builder.getOrCreate()
    except PySparkException as err:  # the JVM did not start; its reason is in the log
        raise SparkSetupError(f"Spark did not start ({type(err).__name__}); see {log}") from err
    session.sparkContext.setLogLevel("WARN")
    return _shipped(session, platform)


def start_spark(platform: Platform, app_name: str,
                waiting: Callable[[str], AbstractContextManager[Any]] = nullcontext) -> SparkSession:
    """:func:`spark_session`, announced through ``waiting`` (a command's spinner): the first start
    downloads the jars, which takes a while."""
    with waiting("starting Spark (the first start downloads its jars from Maven Central)"):
        return spark_session(platform, app_name)
