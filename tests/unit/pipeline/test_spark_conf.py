"""The pipelines' Spark settings and Kafka client options, built from platform.yaml."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conveyor.config import ConfigError, NotSetError, Platform, parse_platform
from conveyor.pipeline.errors import LakeConfigError
from conveyor.pipeline.kafka_source import java_client_options
from conveyor.pipeline.tables import lake_topics
from conveyor.pipeline.catalog import CATALOG, warehouse_uri
from conveyor.pipeline.spark import POM, SPARK_VERSION, session_conf

ROOT = Path(__file__).resolve().parents[3]


def demo(**pipeline: object) -> Platform:
    data = yaml.safe_load((ROOT / "platform.yaml").read_text())
    data["pipeline"].update(pipeline)
    return parse_platform(data, root=ROOT)


def test_session_pins_the_connector_and_iceberg_for_the_installed_spark():
    import pyspark

    assert pyspark.__version__ == SPARK_VERSION
    pom = POM.read_text()
    assert f"<spark.version>{SPARK_VERSION}</spark.version>" in pom
    assert f"<spark.line>{SPARK_VERSION.rsplit('.', 1)[0]}</spark.line>" in pom


def test_session_conf_uses_the_platform_s_warehouse_and_a_small_driver():
    conf = session_conf(demo(), "x", ["/jars/a.jar", "/jars/b.jar"])
    assert conf[f"spark.sql.catalog.{CATALOG}.warehouse"] == str(ROOT / ".conveyor" / "warehouse")
    assert conf[f"spark.sql.catalog.{CATALOG}.type"] == "hadoop"
    assert (conf["spark.master"], conf["spark.driver.memory"]) == ("local[2]", "1g")
    assert conf["spark.ui.enabled"] == "false"
    assert conf["spark.jars"] == "/jars/a.jar,/jars/b.jar"


def test_a_warehouse_uri_is_kept_as_given():
    shared = {"type": "jdbc", "uri": "jdbc:postgresql://db:5432/lake", "warehouse": "s3a://lake/warehouse"}
    assert warehouse_uri(demo(catalog=shared)) == "s3a://lake/warehouse"


@pytest.mark.parametrize("catalog, expected", [
    ({"type": "jdbc", "uri": "jdbc:postgresql://db:5432/lake", "options": {"jdbc.user": "u", "jdbc.password": "p"}},
     {"catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog", "uri": "jdbc:postgresql://db:5432/lake",
      "jdbc.user": "u", "jdbc.password": "p"}),
    ({"type": "rest", "uri": "https://catalog:8181"},
     {"catalog-impl": "org.apache.iceberg.rest.RESTCatalog", "uri": "https://catalog:8181"}),
    ({"type": "hive", "uri": "thrift://metastore:9083"}, {"type": "hive", "uri": "thrift://metastore:9083"}),
    ({"type": "hadoop"}, {"type": "hadoop"}),
])
def test_each_catalog_type_maps_to_iceberg_s_spark_catalog(catalog, expected):
    conf = session_conf(demo(catalog={**catalog, "warehouse": "s3a://lake/w" if catalog["type"] != "hadoop" else "w"}),
                        "x", [])
    prefix = f"spark.sql.catalog.{CATALOG}"
    assert conf[prefix] == "org.apache.iceberg.spark.SparkCatalog"
    assert {k.removeprefix(prefix + "."): v for k, v in conf.items()
            if k.startswith(prefix + ".") and k.removeprefix(prefix + ".") not in ("warehouse", "cache-enabled")} == expected


def test_a_jdbc_catalog_without_uri_takes_the_database_up_started_else_names_the_setting(tmp_path):
    from conveyor.runtime.local import LocalPlatform

    data = yaml.safe_load((ROOT / "platform.yaml").read_text())
    data["runtime"].update(postgres={"port": 27432}, home=str(tmp_path))
    data["pipeline"]["catalog"] = {"type": "jdbc"}
    platform = parse_platform(data, root=ROOT)
    with pytest.raises(NotSetError, match=r"^pipeline\.catalog\.uri is not set: .*`conveyor up`"):
        session_conf(platform, "x", [])
    local = LocalPlatform(platform)
    local.security.ensure()
    conf = session_conf(local.clients, "x", [])
    assert conf[f"spark.sql.catalog.{CATALOG}.uri"] == "jdbc:postgresql://127.0.0.1:27432/conveyor"
    assert conf[f"spark.sql.catalog.{CATALOG}.jdbc.user"] == "conveyor"


def test_java_client_options_translate_librdkafka_security_settings():
    data = yaml.safe_load((ROOT / "platform.yaml").read_text())
    data["clusters"]["central"] = {
        "role": "read", "brokers": 3, "bootstrap": "k1:9092,k2:9092",
        "client": {"security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512",
                   "sasl.username": "conveyor", "sasl.password": 'p"w', "ssl.ca.location": "/etc/ca.pem"},
    }
    options = java_client_options(parse_platform(data, root=ROOT), "central")
    assert options["kafka.bootstrap.servers"] == "k1:9092,k2:9092"
    assert options["kafka.security.protocol"] == "SASL_SSL"
    assert options["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    assert options["kafka.sasl.jaas.config"] == (
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="conveyor" password="p\\"w";'
    )
    assert (options["kafka.ssl.truststore.location"], options["kafka.ssl.truststore.type"]) == ("/etc/ca.pem", "PEM")
    assert not any("sasl.username" in key or "sasl.password" in key for key in options)


def test_lake_topics_come_from_the_cli_then_the_file_then_the_lake_consumers():
    assert lake_topics(demo()) == ["ad-events"]
    assert lake_topics(demo(), ["notifications"]) == ["notifications"]
    data = yaml.safe_load((ROOT / "platform.yaml").read_text())
    del data["pipeline"]["lake"]["topics"]
    assert lake_topics(parse_platform(data, root=ROOT)) == ["ad-events"]  # it names `lake` among consumers
    with pytest.raises(LakeConfigError, match="not declared"):
        lake_topics(demo(), ["nope"])


@pytest.mark.parametrize(
    ("topics", "problem"),
    [
        (["nope"], "pipeline.lake.topics: names unknown topic 'nope'"),
        (["_contracts"], "pipeline.lake.topics: topic '_contracts' has no contract"),
    ],
)
def test_platform_check_names_a_lake_topic_it_cannot_land(topics, problem):
    with pytest.raises(ConfigError) as raised:
        demo(lake={"topics": topics})
    assert any(str(p).startswith(problem) for p in raised.value.problems), raised.value.problems


def test_loopback_and_no_ui_only_for_a_local_master():
    local = session_conf(demo(), "x", [])
    assert (local["spark.driver.host"], local["spark.driver.bindAddress"], local["spark.ui.enabled"]) == (
        "127.0.0.1", "127.0.0.1", "false")
    cluster = session_conf(demo(spark={"master": "spark://spark-master:7077", "driver_host": "10.1.2.3"}), "x", [])
    assert cluster["spark.master"] == "spark://spark-master:7077"
    assert cluster["spark.driver.host"] == "10.1.2.3"
    assert "spark.driver.bindAddress" not in cluster and "spark.ui.enabled" not in cluster
    # On a cluster the executors put the dependencies the session ships first on their Python path.
    assert cluster["spark.executorEnv.PYTHONPATH"] == "conveyor-deps"
    assert "spark.executorEnv.PYTHONPATH" not in local


def test_any_other_spark_setting_jars_and_packages_pass_through(monkeypatch):
    monkeypatch.setenv("S3_SECRET", "s3cr3t")
    platform = demo(spark={"master": "k8s://https://k:6443", "jars": ["/opt/jars/extra.jar"],
                           "packages": ["org.apache.hadoop:hadoop-aws:3.4.1"],
                           "conf": {"spark.executor.memory": "4g", "spark.hadoop.fs.s3a.secret.key": "${S3_SECRET}"}})
    conf = session_conf(platform, "x", ["/jars/a.jar"])
    assert conf["spark.jars"] == "/jars/a.jar,/opt/jars/extra.jar"
    assert conf["spark.jars.packages"] == "org.apache.hadoop:hadoop-aws:3.4.1"
    assert (conf["spark.executor.memory"], conf["spark.hadoop.fs.s3a.secret.key"]) == ("4g", "s3cr3t")
    assert "s3cr3t" not in repr(platform.pipeline.spark)


@pytest.mark.parametrize(("spark", "problem"), [
    ({"conf": {"executor.memory": "4g"}}, "is not a Spark setting"),
    ({"conf": {"spark.master": "yarn"}}, "give spark.master as pipeline.spark.master"),
    ({"conf": {"spark.jars": "/a.jar"}}, "give spark.jars as pipeline.spark.jars"),
    ({"packages": ["hadoop-aws"]}, "is not a Maven coordinate"),
])
def test_settings_with_keys_of_their_own_are_refused_in_conf(spark, problem):
    with pytest.raises(ConfigError) as raised:
        demo(spark=spark)
    assert any(problem in str(p) for p in raised.value.problems), raised.value.problems


@pytest.mark.parametrize("master", ["local", "local[*]", "local[4]", "spark://h:7077", "yarn", "k8s://https://k:6443"])
def test_every_kind_of_master_is_taken(master):
    assert demo(spark={"master": master}).pipeline.spark.master == master


def test_an_unknown_master_is_refused():
    with pytest.raises(ConfigError) as raised:
        demo(spark={"master": "mesos://old:5050"})
    assert any(str(p).startswith("pipeline.spark.master") for p in raised.value.problems), raised.value.problems


def test_an_unreachable_master_is_one_error_naming_it():
    import socket

    from conveyor.pipeline.errors import SparkSetupError
    from conveyor.pipeline.spark import require_reachable_master

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(SparkSetupError, match=f"Spark master spark://127.0.0.1:{port} did not answer within 2 s"):
        require_reachable_master(f"spark://127.0.0.1:{port}", 2.0)
    require_reachable_master("yarn", 2.0)  # its address is in the Hadoop configuration: nothing to probe
