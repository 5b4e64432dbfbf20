"""Ports, folders and broker properties of the local runtime, from the demo platform."""

from __future__ import annotations

from pathlib import Path

import pytest

from conveyor.config import load_platform
from conveyor.runtime.layout import CONTROLLER_ID, plan_layout, redis_layout
from conveyor.runtime.properties import server_properties

ROOT = Path(__file__).resolve().parents[3]
PLATFORM = load_platform(ROOT / "platform.yaml")


def test_every_node_gets_its_own_ports_and_folder():
    nodes = [n for layout in plan_layout(PLATFORM) for n in layout.nodes]
    ports = [p for n in nodes for p in (n.client_port, n.controller_port, n.metrics_port)]
    assert len(ports) == len(set(ports))
    assert len({n.dir for n in nodes}) == len(nodes)
    assert redis_layout(PLATFORM).port not in ports


def test_single_broker_clusters_are_combined_and_larger_ones_get_a_controller():
    layouts = {layout.name: layout for layout in plan_layout(PLATFORM)}
    (dc1,) = layouts["dc1"].nodes
    assert dc1.is_broker and dc1.is_controller
    central = layouts["central"]
    assert [n.node_id for n in central.controllers] == [CONTROLLER_ID]
    assert [n.node_id for n in central.brokers] == [1, 2, 3]
    assert [n.rack for n in central.brokers] == ["r1", "r2", "r3"]


@pytest.fixture
def material(tmp_path: Path):
    """TLS and SASL material for the demo's secured central."""
    from conveyor.runtime.security import LocalSecurity

    material = LocalSecurity(tmp_path)
    material.ensure()
    return material


def test_broker_defaults_follow_the_mission(material):
    central = next(layout for layout in plan_layout(PLATFORM) if layout.name == "central")
    props = server_properties(central, central.brokers[0], material)
    assert props["unclean.leader.election.enable"] == "false"
    assert props["auto.create.topics.enable"] == "false"
    assert props["default.replication.factor"] == "3"
    assert props["min.insync.replicas"] == "2"
    assert props["broker.rack"] == "r1"
    assert props["process.roles"] == "broker"
    assert props["listeners"].startswith("CLIENT://127.0.0.1:")
    controller = server_properties(central, central.controllers[0], material)
    assert controller["process.roles"] == "controller"
    assert "advertised.listeners" not in controller


def test_every_listener_is_on_loopback(material):
    for layout in plan_layout(PLATFORM):
        for node in layout.nodes:
            for listener in server_properties(layout, node, material)["listeners"].split(","):
                assert "//127.0.0.1:" in listener


def test_a_sasl_ssl_cluster_authenticates_every_listener_and_allows_nothing_without_an_acl(tmp_path):
    from conveyor.config import parse_platform
    from conveyor.runtime.security import LocalSecurity

    platform = parse_platform({"clusters": {"vault": {"role": "read", "brokers": 2, "security": "sasl_ssl"}}})
    (layout,) = plan_layout(platform)
    material = LocalSecurity(tmp_path)
    material.ensure()
    broker, controller = layout.brokers[0], layout.controllers[0]
    props = server_properties(layout, broker, material)
    assert props["listener.security.protocol.map"] == "CLIENT:SASL_SSL,CONTROLLER:SSL"
    assert props["sasl.mechanism.inter.broker.protocol"] == "SCRAM-SHA-512"
    assert props["allow.everyone.if.no.acl.found"] == "false"
    assert props["super.users"] == "User:admin;User:CN=conveyor-node"
    controller_props = server_properties(layout, controller, material)
    assert controller_props["listener.name.controller.ssl.client.auth"] == "required"
    assert "sasl.enabled.mechanisms" not in controller_props
    assert material.admin_password in props["listener.name.client.scram-sha-512.sasl.jaas.config"]
    with pytest.raises(ValueError, match="sasl_ssl"):
        server_properties(layout, broker)
