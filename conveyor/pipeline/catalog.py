"""The Iceberg catalog every pipeline table lives in, as Spark settings.

Tables are ``lake.<namespace>.<table>``; the catalog's kind, address and warehouse come from
``pipeline.catalog`` in platform.yaml (checked there: no Hadoop catalog on an object store).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from conveyor.config import NotSetError, Platform
from conveyor.pipeline.errors import SparkSetupError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: The name of the catalog in every pipeline session: ``lake.<namespace>.<table>``.
CATALOG = "lake"
_PREFIX = f"spark.sql.catalog.{CATALOG}"
#: Iceberg's catalog implementations beside the built-in ``hadoop`` and ``hive`` types.
_IMPLEMENTATIONS = {"jdbc": "org.apache.iceberg.jdbc.JdbcCatalog", "rest": "org.apache.iceberg.rest.RESTCatalog"}


def warehouse_uri(platform: Platform) -> str:
    """pipeline.catalog.warehouse as Iceberg needs it: a URI as given, a folder relative to platform.yaml."""
    warehouse = platform.pipeline.catalog.warehouse
    if "://" in warehouse:
        return warehouse
    return str(platform.resolve(warehouse).resolve())


def local_warehouse(platform: Platform) -> Path | None:
    """The warehouse folder when it is on this machine's file system, else None."""
    warehouse = platform.pipeline.catalog.warehouse
    if "://" in warehouse and not warehouse.startswith("file://"):
        return None
    return Path(warehouse_uri(platform).removeprefix("file://"))


#: Iceberg's FileIO for S3 (in iceberg-aws-bundle).
S3_FILE_IO = "org.apache.iceberg.aws.s3.S3FileIO"


def on_s3(platform: Platform) -> bool:
    """Whether the warehouse is on S3 (or an S3 API): its URI's scheme, or S3FileIO named."""
    catalog = platform.pipeline.catalog
    io = catalog.options.get("io-impl")
    return catalog.warehouse.startswith(("s3://", "s3a://")) or (io is not None and io.get_secret_value() == S3_FILE_IO)


def catalog_properties(platform: Platform) -> dict[str, str]:
    """The Iceberg catalog properties of ``pipeline.catalog`` (without Spark's prefix)."""
    catalog = platform.pipeline.catalog
    properties = {"warehouse": warehouse_uri(platform)}
    if catalog.type in _IMPLEMENTATIONS:
        properties["catalog-impl"] = _IMPLEMENTATIONS[catalog.type]
    else:
        properties["type"] = catalog.type
    if catalog.uri is not None:
        properties["uri"] = catalog.uri
    elif catalog.type == "jdbc":
        raise NotSetError("pipeline.catalog.uri", "a jdbc catalog needs its database: give its uri in platform.yaml, "
                                                  "or set runtime.postgres and run `conveyor up` to start one")
    return properties | {key: value.get_secret_value() for key, value in catalog.options.items()}


def catalog_conf(platform: Platform) -> dict[str, str]:
    """The Spark settings that make ``CATALOG`` the platform's Iceberg catalog."""
    return {
        _PREFIX: "org.apache.iceberg.spark.SparkCatalog",
        **{f"{_PREFIX}.{key}": value for key, value in catalog_properties(platform).items()},
        # Another process (the next scheduled run, a concurrent one, `lake status`) commits to the
        # same tables: always read the table's current metadata instead of a cached copy.
        f"{_PREFIX}.cache-enabled": "false",
    }


def describe(platform: Platform) -> str:
    """One line naming the catalog, for titles and messages."""
    uri = platform.pipeline.catalog.uri
    return f"{platform.pipeline.catalog.type} catalog {uri + ', ' if uri else ''}warehouse {warehouse_uri(platform)}"


def require_catalog(spark: SparkSession, platform: Platform) -> None:
    """Refuse to work on ``platform`` through a session whose catalog is another one; reach it."""
    for key, value in catalog_conf(platform).items():
        running = spark.conf.get(key, None)
        if running != value:
            raise SparkSetupError(f"the Spark session has {key}={running}, not {value} ({describe(platform)})")
    _reach(spark, platform)


def _reach(spark: SparkSession, platform: Platform, attempts: int = 3) -> None:
    """Ask the catalog for a namespace, which makes Spark initialize it. Two processes that
    reach a new JDBC database at once race to create Iceberg's own tables in it and the loser
    fails; Spark keeps no catalog that failed to initialize, so the next try finds the tables."""
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    for attempt in range(1, attempts + 1):
        try:
            # Not SHOW NAMESPACES: a Hadoop catalog whose warehouse folder is not made yet fails it.
            spark.catalog.databaseExists(f"{CATALOG}.events")
            return
        except (PySparkException, Py4JError) as err:
            if attempt == attempts:
                java = getattr(err, "java_exception", None)
                raise SparkSetupError(f"cannot reach the {describe(platform)}: "
                                      f"{str(java.toString() if java is not None else err).splitlines()[0]}") from err
            time.sleep(attempt)
