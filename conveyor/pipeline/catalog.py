"""The Iceberg catalog every pipeline table lives in, as Spark settings.

Tables are ``lake.<namespace>.<table>``; the catalog's kind and warehouse come from platform.yaml.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from conveyor.config import Platform
from conveyor.pipeline.errors import SparkSetupError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: The name of the catalog in every pipeline session: ``lake.<namespace>.<table>``.
CATALOG = "lake"


def warehouse_uri(platform: Platform) -> str:
    """pipeline.warehouse as Iceberg needs it: a URI as given, a folder relative to platform.yaml."""
    warehouse = platform.pipeline.warehouse
    if "://" in warehouse:
        return warehouse
    return str(platform.resolve(warehouse).resolve())


def local_warehouse(platform: Platform) -> Path | None:
    """The warehouse folder when it is on this machine's file system, else None."""
    warehouse = platform.pipeline.warehouse
    if "://" in warehouse and not warehouse.startswith("file://"):
        return None
    return Path(warehouse_uri(platform).removeprefix("file://"))


def catalog_conf(platform: Platform) -> dict[str, str]:
    """The Spark settings that make ``CATALOG`` the platform's Iceberg catalog."""
    catalog = f"spark.sql.catalog.{CATALOG}"
    return {
        catalog: "org.apache.iceberg.spark.SparkCatalog",
        f"{catalog}.type": "hadoop",
        f"{catalog}.warehouse": warehouse_uri(platform),
        # Another process (the next scheduled run, `lake status`) commits to the same tables: always
        # read the table's current metadata instead of a cached copy.
        f"{catalog}.cache-enabled": "false",
    }


def require_warehouse(spark: SparkSession, platform: Platform) -> None:
    """Refuse to work on ``platform`` through a session whose catalog is another warehouse."""
    running = spark.conf.get(f"spark.sql.catalog.{CATALOG}.warehouse", None)
    if running != warehouse_uri(platform):
        raise SparkSetupError(f"the Spark session works on warehouse {running}, not {warehouse_uri(platform)}")
