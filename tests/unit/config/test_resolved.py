"""The resolved view: written for its owner only, read back as written, and laid over platform.yaml
without overriding what the file itself says."""

from __future__ import annotations

import pytest
import yaml

from conveyor.config import ConfigError, load_resolved_platform, parse_platform
from conveyor.config.resolved import (ResolvedCluster, ResolvedView, read_resolved_view, resolved_view_file,
                                      with_resolved_view, write_resolved_view)
from conveyor.config.tls import Tls

VIEW = ResolvedView.model_validate({
    "clusters": {
        "local": {"bootstrap": "127.0.0.1:9092", "client": {"security.protocol": "SASL_SSL", "sasl.password": "pw"},
                  "credentials": {"lake": {"sasl.username": "conveyor-lake"}}, "users": {"shop": "shop-pw"},
                  "metrics": [{"url": "http://127.0.0.1:9094/metrics", "node": "local-broker-1", "broker": 1}],
                  "disks": {1: "/data/1"}},
        "existing": {"bootstrap": "127.0.0.1:9999"},
        "gone": {"bootstrap": "127.0.0.1:7777"}},
    "redis": "redis://127.0.0.1:9091/0",
    "tls": {"cert": "/s/server.pem", "key": "/s/server-key.pem", "ca": "/s/ca.pem"}})


def _platform(tmp_path, **extra):
    data = {"runtime": {"home": str(tmp_path / "home")},
            "clusters": {"local": {"role": "writable"}, "existing": {"role": "read", "bootstrap": "prod:9092"}},
            **extra}
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(data))
    return path, parse_platform(data, root=tmp_path)


def test_the_view_is_its_owners_only_and_reads_back_as_written(tmp_path):
    _, platform = _platform(tmp_path)
    assert read_resolved_view(platform) is None
    path = write_resolved_view(platform, VIEW)
    assert path == resolved_view_file(platform) and path.stat().st_mode & 0o777 == 0o600
    assert read_resolved_view(platform) == VIEW
    assert "shop-pw" in path.read_text()  # the clients read it back: in clear, in a private file


def test_laid_over_platform_yaml_it_gives_each_started_cluster_its_settings(tmp_path):
    path, platform = _platform(tmp_path)
    write_resolved_view(platform, VIEW)
    resolved = load_resolved_platform(path)
    local = resolved.clusters["local"]
    assert resolved.bootstrap("local") == "127.0.0.1:9092"
    assert local.client["sasl.password"].get_secret_value() == "pw" and set(local.users) == {"shop"}
    assert [p.node for p in local.metrics] == ["local-broker-1"] and local.disks == {1: "/data/1"}
    assert resolved.pipeline.realtime.redis.get_secret_value() == "redis://127.0.0.1:9091/0"
    assert resolved.tls == VIEW.tls
    # What platform.yaml says wins over a view written before it changed; a cluster no longer in
    # the file is left out.
    assert resolved.bootstrap("existing") == "prod:9092" and "gone" not in resolved.clusters


def test_the_files_own_redis_and_certificate_win(tmp_path):
    _, platform = _platform(tmp_path, pipeline={"realtime": {"redis": "redis://cache:6379/0"}},
                            tls={"cert": "c.pem", "key": "k.pem"})
    resolved = with_resolved_view(platform, VIEW)
    assert resolved.pipeline.realtime.redis.get_secret_value() == "redis://cache:6379/0"
    assert resolved.tls == Tls(cert="c.pem", key="k.pem")


def test_a_damaged_view_says_to_run_up_again(tmp_path):
    _, platform = _platform(tmp_path)
    resolved_view_file(platform).parent.mkdir(parents=True)
    resolved_view_file(platform).write_text("clusters: {local: {port: 1}}\n")
    with pytest.raises(ConfigError, match="run `conveyor up` again"):
        read_resolved_view(platform)


def test_a_started_cluster_needs_its_bootstrap():
    with pytest.raises(ValueError):
        ResolvedCluster.model_validate({"client": {}})
