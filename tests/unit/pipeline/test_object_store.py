"""Object storage in a pipeline session: which jars it takes, and S3A's settings for the views'
checkpoint from the catalog's S3 options."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from conveyor.config import Platform, parse_platform
from conveyor.pipeline.object_store import checkpoint_on_s3, hadoop_uri, needs_s3, s3a_conf
from conveyor.pipeline.realtime.job import checkpoint_location
from conveyor.pipeline.realtime.plan import job_id, job_views
from conveyor.pipeline.spark import POM, session_conf

ROOT = Path(__file__).resolve().parents[3]
ON_S3 = {"type": "jdbc", "uri": "jdbc:postgresql://db:5432/lake", "warehouse": "s3://lake/warehouse",
         "options": {"io-impl": "org.apache.iceberg.aws.s3.S3FileIO", "s3.endpoint": "http://127.0.0.1:9000",
                     "s3.path-style-access": "true", "client.region": "eu-west-1",
                     "s3.access-key-id": "AKIA", "s3.secret-access-key": "secret"}}


def demo(catalog: dict | None = None, **realtime: object) -> Platform:
    data = yaml.safe_load((ROOT / "platform.yaml").read_text())
    if catalog is not None:
        data["pipeline"]["catalog"] = catalog
    data["pipeline"]["realtime"].update(realtime)
    return parse_platform(data, root=ROOT)


def test_a_checkpoint_on_s3_is_written_through_s3a_under_the_job_s_name():
    platform = demo(ON_S3, checkpoint="s3://views/checkpoints/")
    assert checkpoint_on_s3(platform) and needs_s3(platform)
    views = job_views(platform)
    assert checkpoint_location(platform, views) == f"s3a://views/checkpoints/{job_id(views)}"
    assert hadoop_uri("s3a://b/k") == "s3a://b/k" and hadoop_uri("hdfs://nn/s3://x") == "hdfs://nn/s3://x"


def test_s3a_takes_the_catalog_s_endpoint_region_addressing_and_keys():
    conf = session_conf(demo(ON_S3, checkpoint="s3a://views/checkpoints"), "x", [])
    assert {k: v for k, v in conf.items() if k.startswith("spark.hadoop.fs.s3a.")} == {
        "spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:9000", "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.endpoint.region": "eu-west-1", "spark.hadoop.fs.s3a.access.key": "AKIA",
        "spark.hadoop.fs.s3a.secret.key": "secret"}


def test_a_setting_of_pipeline_spark_conf_overrides_the_catalog_s():
    platform = demo(ON_S3, checkpoint="s3a://views/checkpoints")
    data = platform.model_dump(mode="json")
    data["pipeline"]["spark"]["conf"] = {"spark.hadoop.fs.s3a.endpoint": "http://127.0.0.2:9000"}
    conf = session_conf(parse_platform(yaml.safe_load(yaml.safe_dump(data)), root=ROOT), "x", [])
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.2:9000"


@pytest.mark.parametrize("catalog, checkpoint, on_s3", [(None, "realtime", False), (ON_S3, "realtime", True),
                                                        (None, "s3a://views/c", True), (None, "hdfs://nn/c", False)])
def test_a_session_takes_the_aws_jars_only_when_something_of_it_is_on_s3(catalog, checkpoint, on_s3):
    platform = demo(catalog, checkpoint=checkpoint)
    assert needs_s3(platform) is on_s3
    assert (s3a_conf(platform) == {}) is (catalog is None or not checkpoint.startswith("s3"))


def test_s3a_is_of_pyspark_s_hadoop_version():
    import pyspark

    jars = [jar.name for jar in (Path(pyspark.__file__).parent / "jars").glob("hadoop-client-api-*.jar")]
    assert jars, "PySpark ships no hadoop-client-api jar"
    hadoop = re.fullmatch(r"hadoop-client-api-(.+)\.jar", jars[0]).group(1)
    assert f"<hadoop.version>{hadoop}</hadoop.version>" in POM.read_text()
