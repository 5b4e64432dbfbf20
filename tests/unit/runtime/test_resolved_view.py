"""What `conveyor up` writes of the demo platform: each cluster's bootstrap, metrics pages and
disks; on the secured clusters the admin's settings, each part's own SCRAM user and the users to
make; the Redis with its writer's and reader's credentials, and the edges' certificate. No process
is started."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import yaml

from conveyor import kafka
from conveyor.config import Part, load_platform, parse_platform
from conveyor.config.resolved import read_resolved_view, resolved_view_file
from conveyor.runtime.local import LocalPlatform

ROOT = Path(__file__).resolve().parents[3]


def _local(tmp_path: Path, edit: Callable[[dict], None] = lambda _: None, **runtime: object) -> LocalPlatform:
    """The demo's platform at home in ``tmp_path``, its file first changed by ``edit``."""
    data = yaml.safe_load((ROOT / "platform.yaml").read_text())
    data["runtime"].update(home=str(tmp_path / "home"), **runtime)
    edit(data)
    local = LocalPlatform(parse_platform(data, root=ROOT))
    local.security.ensure()
    return local


def test_every_started_cluster_has_its_bootstrap_metrics_pages_and_disks(tmp_path):
    local = _local(tmp_path)
    view = local.view()
    assert set(view.clusters) == {"dc1", "dc2", "central"}
    for layout in local.layouts:
        started = view.clusters[layout.name]
        assert started.bootstrap == layout.bootstrap
        assert [(p.url, p.node) for p in started.metrics] == [(n.metrics_url, n.name) for n in layout.nodes]
        assert started.disks == {n.node_id: str(n.data_dir) for n in layout.brokers}
    central = view.clusters["central"].metrics
    assert [(p.broker, p.controller) for p in central] == [(None, True), (1, False), (2, False), (3, False)]
    for name in ("dc1", "dc2", "central"):  # the demo's clusters are all secured
        assert view.clusters[name].client["security.protocol"].get_secret_value() == "SASL_SSL"
        assert "conveyor-gateway" in view.clusters[name].users
    writer, reader = view.redis.get_secret_value(), view.redis_reader.get_secret_value()
    assert writer.startswith("rediss://conveyor-realtime:") and reader.startswith("rediss://conveyor-reader:")
    assert writer.endswith(f"@127.0.0.1:{local.redis.port}/0") and reader.endswith(f"@127.0.0.1:{local.redis.port}/0")
    assert "*" not in repr(view.redis).replace("**********", "")  # masked when shown
    assert view.tls is not None and Path(view.tls.cert).is_file() and view.tls.ca == str(local.security.ca_cert)


def test_on_the_secured_cluster_the_platform_is_admin_and_each_part_its_own_scram_user(tmp_path):
    def billing_writes_directly(data: dict) -> None:
        data["services"]["billing"] = {"token_sha256": "0" * 64}
        data["topics"]["ad-events"]["direct_producers"] = ["billing"]

    clients = _local(tmp_path, billing_writes_directly).clients
    admin = kafka.client_config(clients, "central")
    ops = kafka.client_config(clients.acting_as(Part.ops), "central")
    assert (admin["security.protocol"], admin["sasl.username"], ops["sasl.username"]) == ("SASL_SSL", "admin",
                                                                                          "conveyor-ops")
    assert ops["sasl.password"] != admin["sasl.password"] and ops["ssl.ca.location"] == admin["ssl.ca.location"]
    users = clients.clusters["central"].users
    # A producer that writes on Kafka has its own user; one that sends through the gateway has none.
    assert {part.user for part in Part} | {"billing"} <= set(users) and "adserver" not in users
    assert users["conveyor-ops"].get_secret_value() == ops["sasl.password"]


def test_an_existing_redis_is_the_views(tmp_path):
    view = _local(tmp_path, redis={"url": "redis://cache:6379/0"}).view()
    assert view.redis.get_secret_value() == view.redis_reader.get_secret_value() == "redis://cache:6379/0"


def test_down_takes_the_view_with_it(tmp_path):
    local = _local(tmp_path)
    local.write_view()
    assert read_resolved_view(local.platform) == local.view()
    local.down(timeout=1)
    assert not resolved_view_file(local.platform).exists()


def test_the_runtime_takes_platform_yaml_as_written():
    """A cluster given by bootstrap is not one to start."""
    data = yaml.safe_load((ROOT / "platform.yaml").read_text())
    data["clusters"]["dc2"] = {"role": "writable", "bootstrap": "dc2.example:9092"}
    assert [layout.name for layout in LocalPlatform(parse_platform(data, root=ROOT)).layouts] == ["dc1", "central"]
    assert {layout.name for layout in LocalPlatform(load_platform(ROOT / "platform.yaml")).layouts} == {
        "dc1", "dc2", "central"}


def test_a_service_added_after_up_gets_its_user_from_the_next_apply_and_the_rest_of_the_view_stays(tmp_path):
    from conveyor.cli.common import platform_to_apply

    local = _local(tmp_path)
    local.write_view()
    written = read_resolved_view(local.platform)
    data = yaml.safe_load((ROOT / "platform.yaml").read_text())
    data["runtime"]["home"] = str(tmp_path / "home")
    data["services"]["fraud"] = {"token_sha256": "0" * 64}
    data["topics"]["ad-events"]["consumers"].append("fraud")
    shutil.copytree(ROOT / "contracts", tmp_path / "contracts")
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(data))

    planned = platform_to_apply(path, keep=False)
    assert "fraud" in planned.clusters["central"].users
    assert "fraud" not in read_resolved_view(local.platform).clusters["central"].users, "a plan writes nothing"
    kept = platform_to_apply(path, keep=True)
    view = read_resolved_view(local.platform)
    assert "fraud" in view.clusters["central"].users
    assert view.clusters["central"].users["fraud"] == kept.clusters["central"].users["fraud"]
    assert view.clusters["central"].bootstrap == written.clusters["central"].bootstrap
    assert view.clusters["dc2"].bootstrap == written.clusters["dc2"].bootstrap and view.redis == written.redis
