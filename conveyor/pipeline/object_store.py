"""Object storage (S3, or a store speaking its API) in a pipeline session: the lake's warehouse
through Iceberg's S3FileIO, the views' checkpoint through Hadoop's S3A file system.

A session takes the AWS jars only when something of it is on S3: they are tens of megabytes that
every executor would fetch. S3A takes its endpoint, region, addressing and keys from the catalog's
S3 options when it has them, so a platform names its object store once; a
``spark.hadoop.fs.s3a.*`` setting in ``pipeline.spark.conf`` overrides each, and with neither S3A
asks the AWS SDK's own chain (environment, profile, the host's or the pod's role).
"""

from __future__ import annotations

import re

from conveyor.config import Platform
from conveyor.pipeline.catalog import on_s3

#: The artifacts of conveyor/pipeline/pom.xml a session takes only for S3.
S3_JARS = frozenset({"iceberg-aws-bundle", "hadoop-aws", "s3-transfer-manager"})

#: Iceberg's S3 catalog option -> the S3A setting that means the same.
_S3A_FROM_CATALOG = {
    "s3.endpoint": "fs.s3a.endpoint",
    "s3.path-style-access": "fs.s3a.path.style.access",
    "s3.access-key-id": "fs.s3a.access.key",
    "s3.secret-access-key": "fs.s3a.secret.key",
    "s3.session-token": "fs.s3a.session.token",
    "client.region": "fs.s3a.endpoint.region",
}


def hadoop_uri(uri: str) -> str:
    """``uri`` as Hadoop reads it: ``s3://`` (as Iceberg's warehouses are written) is S3A's ``s3a://``."""
    return re.sub(r"^s3://", "s3a://", uri)


def checkpoint_on_s3(platform: Platform) -> bool:
    return hadoop_uri(platform.pipeline.realtime.checkpoint).startswith("s3a://")


def needs_s3(platform: Platform) -> bool:
    """Whether a session of ``platform`` reaches S3: the warehouse or the views' checkpoint is there."""
    return on_s3(platform) or checkpoint_on_s3(platform)


def s3a_conf(platform: Platform) -> dict[str, str]:
    """Spark settings for S3A, from the catalog's S3 options (none when no checkpoint is on S3)."""
    if not checkpoint_on_s3(platform):
        return {}
    options = platform.pipeline.catalog.options
    return {f"spark.hadoop.{setting}": options[option].get_secret_value()
            for option, setting in _S3A_FROM_CATALOG.items() if option in options}
