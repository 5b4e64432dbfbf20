"""platform.yaml validation: the demo file loads; each kind of bad file names its problem."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from conveyor.config import (ConfigError, NotSetError, load_platform, parse_duration_ms, parse_platform,
                             parse_size_bytes)

ROOT = Path(__file__).resolve().parents[3]
DEMO = yaml.safe_load((ROOT / "platform.yaml").read_text())


def test_demo_platform_loads_with_the_mission_replication():
    platform = load_platform(ROOT / "platform.yaml")
    assert set(platform.clusters) == {"dc1", "dc2", "central"}
    central = platform.clusters["central"]
    assert central.brokers == 3 and central.racks == ["r1", "r2", "r3"]
    assert platform.topics["ad-events"].partitions == 12
    assert platform.topics["notifications"].partitions == 3
    assert platform.topics["ad-events"].replication_on(central) == (3, 2)
    assert platform.topics["ad-events"].replication_on(platform.clusters["dc1"]) == (1, 1)
    assert platform.topics["ad-events"].retention == 7 * 86_400_000


def _with(path: str, value):
    """The demo file with one value replaced (path is dot-separated; None deletes the key)."""
    data = copy.deepcopy(DEMO)
    *parents, last = path.split(".")
    node = data
    for key in parents:
        node = node[key]
    if value is None:
        del node[last]
    else:
        node[last] = value
    return data


BAD_FILES = [
    ("partitions-zero", _with("topics.ad-events.partitions", 0), "topics.ad-events.partitions: must be >= 1"),
    ("partitions-missing", _with("topics.ad-events.partitions", None), "topics.ad-events.partitions: is required"),
    ("partitions-text", _with("topics.ad-events.partitions", "many"), "topics.ad-events.partitions: input should be a valid integer"),
    ("unknown-key", _with("topics.ad-events.partitons", 3), "topics.ad-events.partitons: is not a known setting"),
    ("bad-role", _with("clusters.dc1.role", "primary"), "clusters.dc1.role: must be one of 'writable' or 'read'"),
    ("rf-above-brokers", _with("topics.notifications.replication_factor", 3),
     "topics.notifications.replication_factor: is 3 but cluster 'dc1' has 1 broker(s)"),
    ("min-isr-above-rf", _with("clusters.central.replication", {"factor": 3, "min_insync": 4}),
     "clusters.central.replication.min_insync: is 4, above the replication factor 3"),
    ("racks-count", _with("clusters.central.racks", ["r1", "r2"]),
     "clusters.central: racks names 2 racks for 3 brokers"),
    ("bad-retention", _with("topics.ad-events.retention", "a week"),
     "topics.ad-events.retention: must be a duration such as 30s, 15m, 7d"),
    ("unknown-producer", _with("topics.ad-events.producers", ["nobody"]),
     "topics.ad-events.producers: names unknown service 'nobody'"),
    ("missing-contract", _with("topics.ad-events.contract", "contracts/none.json"),
     "topics.ad-events.contract: file contracts/none.json does not exist"),
    ("route-unknown-cluster", _with("routes.dc1-central.destination", "moon"),
     "routes.dc1-central.destination: names unknown cluster 'moon'"),
    ("route-from-read-cluster", _with("routes.dc1-central.source", "central"),
     "routes.dc1-central.source: cluster 'central' is not writable"),
    ("route-bad-regex", _with("routes.dc1-central.pattern", "ad-(events"),
     "routes.dc1-central: pattern is not a valid regular expression"),
    ("route-unknown-topic", _with("routes.dc1-central.topics", ["clicks"]),
     "routes.dc1-central.topics: names unknown topic 'clicks'"),
    ("bad-token", _with("services.adserver.token_sha256", "secret"), "services.adserver.token_sha256: must match"),
    ("isolation-untagged", _with("topics.ad-events.isolation", "ads"),
     "topics.ad-events.isolation: no cluster has brokers tagged 'ads'"),
    ("tag-beyond-brokers", _with("clusters.central.tags", {"ads": [1, 4]}),
     "clusters.central: tag 'ads' names broker ids [4] beyond the 3 brokers"),
    ("no-clusters", _with("clusters", {}), "clusters: must have at least 1 item(s)"),
    ("bad-topic-name", _with("topics.bad topic", {"partitions": 1}), "topics.bad topic.[key]: must match"),
    ("unknown-catalog-type", _with("pipeline.catalog", {"type": "glue"}),
     "pipeline.catalog.type: input should be 'hadoop', 'jdbc', 'rest' or 'hive'"),
    ("hadoop-on-object-store", _with("pipeline.catalog", {"type": "hadoop", "warehouse": "s3a://bucket/lake"}),
     "pipeline.catalog: type hadoop cannot keep tables on s3a://bucket/lake: a Hadoop catalog commits by an "
     "atomic rename, which object stores lack, so two commits could both win; use type jdbc, rest or hive"),
    ("jdbc-without-database", _with("pipeline.catalog", {"type": "jdbc"}),
     "pipeline.catalog.uri: a jdbc catalog needs a uri, or runtime.postgres to run one locally"),
    ("hive-uri-scheme", _with("pipeline.catalog", {"type": "hive", "uri": "http://metastore:9083"}),
     "pipeline.catalog: uri of a hive catalog must start with thrift://"),
]


@pytest.mark.parametrize("data, expected", [(d, e) for _, d, e in BAD_FILES], ids=[i for i, _, _ in BAD_FILES])
def test_bad_file_names_the_problem_and_its_path(data, expected):
    with pytest.raises(ConfigError) as caught:
        parse_platform(data, root=ROOT)
    messages = [str(p) for p in caught.value.problems]
    assert any(m.startswith(expected) for m in messages), messages


def test_every_problem_is_reported_at_once():
    data = _with("topics.ad-events.partitions", 0)
    data["topics"]["notifications"]["retention"] = "soon"
    data["clusters"]["dc2"]["brokers"] = -1
    with pytest.raises(ConfigError) as caught:
        parse_platform(data, root=ROOT)
    paths = {p.path for p in caught.value.problems}
    assert {"topics.ad-events.partitions", "topics.notifications.retention", "clusters.dc2.brokers"} <= paths


def test_yaml_syntax_error_gives_line_and_column(tmp_path):
    bad = tmp_path / "platform.yaml"
    bad.write_text("clusters:\n  dc1: {role: writable\n")
    with pytest.raises(ConfigError) as caught:
        load_platform(bad)
    assert "line 3" in str(caught.value) and "not valid YAML" in str(caught.value)


def test_missing_file_says_how_to_point_at_one(tmp_path):
    with pytest.raises(ConfigError, match="pass --platform or set CONVEYOR_PLATFORM"):
        load_platform(tmp_path / "nope.yaml")


def test_a_cluster_without_bootstrap_is_an_error_naming_the_field_when_used():
    data = _with("clusters.central", {"role": "read", "brokers": 3, "bootstrap": "kafka-1.prod:9092"})
    platform = parse_platform(data, root=ROOT)
    assert platform.bootstrap("central") == "kafka-1.prod:9092"
    with pytest.raises(NotSetError, match=r"^clusters\.dc1\.bootstrap is not set: .*run `conveyor up`") as failure:
        platform.bootstrap("dc1")
    assert failure.value.path == "clusters.dc1.bootstrap"


@pytest.mark.parametrize("setting, value", [("client", {"security.protocol": "SSL"}), ("users", {"shop": "pw"}),
                                            ("metrics", ["http://k:7071/metrics"]), ("disks", {1: "/data"})])
def test_what_up_says_of_its_clusters_a_file_gives_only_with_bootstrap(setting, value):
    with pytest.raises(ConfigError) as failure:
        parse_platform(_with(f"clusters.dc1.{setting}", value), root=ROOT)
    assert [p.path for p in failure.value.problems] == [f"clusters.dc1.{setting}"]
    assert "only applies to a cluster given by bootstrap" in str(failure.value)


def test_a_metrics_page_is_a_url_or_a_node_with_its_broker_id():
    data = _with("clusters.central", {"role": "read", "brokers": 3, "bootstrap": "k:9092", "metrics": [
        "http://k1:7071/metrics", {"url": "http://k2:7071/metrics", "node": "k2", "broker": 2},
        {"url": "http://c:7071/metrics", "controller": True}]})
    pages = parse_platform(data, root=ROOT).clusters["central"].metrics
    assert [(p.url, p.node, p.broker, p.controller) for p in pages] == [
        ("http://k1:7071/metrics", None, None, False), ("http://k2:7071/metrics", "k2", 2, False),
        ("http://c:7071/metrics", None, None, True)]
    with pytest.raises(ConfigError, match="a page is a broker's"):
        parse_platform(_with("clusters.central.metrics", [{"url": "http://c:1/m", "broker": 1, "controller": True}]),
                       root=ROOT)


def test_client_secrets_are_masked_in_repr():
    data = _with("clusters.central", {"role": "read", "brokers": 3, "bootstrap": "k:9092",
                                      "client": {"sasl.password": "hunter2"}})
    platform = parse_platform(data, root=ROOT)
    assert "hunter2" not in repr(platform.clusters["central"])


@pytest.mark.parametrize("text, ms", [("250ms", 250), ("30s", 30_000), ("15m", 900_000), ("7d", 604_800_000),
                                      ("1w", 604_800_000), (-1, -1), ("forever", -1), (1000, 1000)])
def test_durations(text, ms):
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("text, size", [("512MiB", 512 * 2**20), ("10GB", 10**10), (4096, 4096), ("1kb", 1000)])
def test_sizes(text, size):
    assert parse_size_bytes(text) == size


@pytest.mark.parametrize("bad", ["7 days", True, -5, "1.5h"])
def test_bad_durations(bad):
    with pytest.raises(ValueError):
        parse_duration_ms(bad)


def test_broken_entry_does_not_echo_as_unknown_reference():
    data = _with("clusters.dc1.brokers", 0)
    with pytest.raises(ConfigError) as caught:
        parse_platform(data, root=ROOT)
    assert [str(p) for p in caught.value.problems] == ["clusters.dc1.brokers: must be >= 1"]


def test_one_rule_picks_the_read_cluster() -> None:
    """An explicit choice, else pipeline.source, else the only cluster of role read; otherwise an
    error that names what to set."""
    data = {"clusters": {"dc1": {"role": "writable"}, "central": {"role": "read", "brokers": 3},
                         "archive": {"role": "read"}}}
    two_reads = parse_platform(data)
    with pytest.raises(ConfigError, match="set it, or give --cluster: there are 2 read clusters"):
        two_reads.read_cluster()
    assert two_reads.read_cluster("archive") == "archive"
    with pytest.raises(ConfigError, match="no such cluster"):
        two_reads.read_cluster("nowhere")
    assert parse_platform({**data, "pipeline": {"source": "central"}}).read_cluster() == "central"
    one_read = parse_platform({"clusters": {k: v for k, v in data["clusters"].items() if k != "archive"}})
    assert one_read.read_cluster() == "central"


def test_security_is_for_local_clusters_and_an_existing_one_gives_it_under_client():
    data = _with("clusters.central", {"role": "read", "brokers": 3, "bootstrap": "k:9092", "security": "sasl_ssl"})
    with pytest.raises(ConfigError, match="for an existing cluster at bootstrap, give its settings under client"):
        parse_platform(data, root=ROOT)


def test_a_secret_may_come_from_the_environment_and_never_shows_when_printed(monkeypatch):
    monkeypatch.setenv("CENTRAL_PASSWORD", "hunter2-from-env")
    data = _with("clusters.central", {"role": "read", "brokers": 3, "bootstrap": "k:9092",
                                      "client": {"sasl.password": "${CENTRAL_PASSWORD}"}})
    central = parse_platform(data, root=ROOT).clusters["central"]
    assert central.client["sasl.password"].get_secret_value() == "hunter2-from-env"
    assert "hunter2" not in repr(central) and "hunter2" not in str(central.model_dump())


def test_the_catalog_s_options_and_the_alert_hook_are_secrets_too(monkeypatch):
    monkeypatch.setenv("LAKE_DB_PASSWORD", "hunter2-catalog")
    monkeypatch.setenv("HOOK_URL", "https://hooks.example/T0/hunter2-hook")
    data = _with("pipeline.catalog", {"type": "jdbc", "uri": "jdbc:postgresql://db:5432/lake",
                                      "options": {"jdbc.user": "lake", "jdbc.password": "${LAKE_DB_PASSWORD}"}})
    data["ops"] = {**data.get("ops", {}), "notify_url": "${HOOK_URL}"}
    platform = parse_platform(data, root=ROOT)
    from conveyor.pipeline.catalog import catalog_properties

    assert catalog_properties(platform)["jdbc.password"] == "hunter2-catalog"
    assert platform.ops.notify_url.get_secret_value().endswith("hunter2-hook")
    for shown in (repr(platform.pipeline), str(platform.ops), str(platform.model_dump())):
        assert "hunter2" not in shown
    data["ops"]["notify_url"] = "ftp://hooks.example/x"
    with pytest.raises(ConfigError, match="notify_url must start with http:// or https://"):
        parse_platform(data, root=ROOT)


def test_a_component_page_is_a_server_or_a_file():
    data = _with("ops.components", {"host": "host:"})
    with pytest.raises(ConfigError, match="host's page 'host:' is neither http.s.:// nor file:"):
        parse_platform(data, root=ROOT)


def test_a_panel_of_metric_globs_is_an_error_naming_its_queries():
    """The panels once took metric globs (`metrics`, `by`); now PromQL: an old file is told what to write."""
    data = _with("ops.panels", {"replication": {"title": "Replication", "metrics": ["conveyor_replicate_*"],
                                                "by": ["route"]}})
    with pytest.raises(ConfigError) as caught:
        parse_platform(data, root=ROOT)
    assert "ops.panels.replication" in str(caught.value) and "queries: [{expr:" in str(caught.value)
    data = _with("ops.panels", {"replication": {"title": "Replication", "queries": [
        {"expr": "sum by (route) (conveyor_replicate_lag_records)", "legend": "{{route}}"}]}})
    assert parse_platform(data, root=ROOT).ops.panels["replication"].queries[0].legend == "{{route}}"


def test_a_secret_from_a_missing_variable_is_one_error_naming_the_field_and_the_variable(monkeypatch):
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    data = _with("clusters.central", {"role": "read", "brokers": 3, "bootstrap": "k:9092",
                                      "client": {"sasl.password": "${NOT_SET_ANYWHERE}"}})
    with pytest.raises(ConfigError) as failure:
        parse_platform(data, root=ROOT)
    assert [str(p) for p in failure.value.problems] == [
        "clusters.central.client.sasl.password: environment variable NOT_SET_ANYWHERE is not set"]


def test_a_secret_may_come_from_a_file_beside_the_platform_file(tmp_path):
    import shutil

    shutil.copytree(ROOT / "contracts", tmp_path / "contracts")
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "central.txt").write_text("hunter2-from-file\n")
    data = _with("clusters.central", {"role": "read", "brokers": 3, "bootstrap": "k:9092",
                                      "client": {"sasl.password": "file:secrets/central.txt"}})
    central = parse_platform(data, root=tmp_path).clusters["central"]
    assert central.client["sasl.password"].get_secret_value() == "hunter2-from-file"
    missing = _with("clusters.central.client", {"sasl.password": "file:secrets/nope.txt"})
    with pytest.raises(ConfigError, match=r"clusters.central.client.sasl.password: cannot read secret file"):
        parse_platform(missing, root=tmp_path)


def test_a_service_gives_one_token_hash():
    both = _with("services.adserver", {"token_sha256": "0" * 64, "token_scrypt": "scrypt$15$8$1$" + "a" * 32 + "$" + "b" * 64})
    neither = _with("services.adserver", {"description": "no hash"})
    for data in (both, neither):
        with pytest.raises(ConfigError, match="services.adserver: give the token's hash as token_sha256 or token_scrypt"):
            parse_platform(data, root=ROOT)


def test_a_cluster_s_purpose_sets_its_defaults_and_what_may_go_with_it() -> None:
    from conveyor import kafka

    data = copy.deepcopy(DEMO)
    data["clusters"]["logs"] = {"role": "writable", "brokers": 3, "purpose": "logs", "bootstrap": "logs:9092"}
    data["clusters"]["archive"] = {"role": "read", "brokers": 3, "purpose": "offline", "bootstrap": "archive:9092"}
    platform = parse_platform(data, root=ROOT)
    logs, central = platform.clusters["logs"], platform.clusters["central"]
    assert (logs.default_min_insync, central.default_min_insync) == (1, 2)
    assert (logs.managed_producer_quota, central.managed_producer_quota) == (32 * 1024 * 1024, None)
    assert central.model_copy(update={"producer_quota": -1}).managed_producer_quota == -1
    assert platform.topics["ad-events"].replication_on(logs) == (3, 1)
    produced = {k: v for k, v in kafka.producer_config(platform, "logs", "c").items() if k in ("acks", "enable.idempotence")}
    assert produced == {"acks": "1", "enable.idempotence": False}
    assert kafka.producer_config(platform, "logs", "c", {"transactional.id": "t"})["acks"] == "all"
    assert kafka.producer_config(platform, "archive", "c")["acks"] == "all"
    # Of two read clusters, the batch readers take the offline one (unless pipeline.source says).
    assert platform.read_cluster() == "central"
    data["pipeline"].pop("source")
    assert parse_platform(data, root=ROOT).read_cluster() == "archive"

    data["clusters"]["logs"]["failover"] = ["dc1"]
    data["routes"]["into-logs"] = {"source": "dc1", "destination": "logs", "pattern": "app-.*", "topics": ["ad-events"]}
    with pytest.raises(ConfigError) as err:
        parse_platform(data, root=ROOT)
    assert {p.path for p in err.value.problems} == {"clusters.logs.failover", "routes.into-logs.mode",
                                                    "routes.into-logs.topics"}


def test_conveyor_home_is_a_deployed_service_s_runtime_home(monkeypatch, tmp_path):
    path = ROOT / "platform.yaml"
    assert load_platform(path).home == ROOT / ".conveyor"
    monkeypatch.setenv("CONVEYOR_HOME", str(tmp_path / "work"))
    assert load_platform(path).home == tmp_path / "work"
