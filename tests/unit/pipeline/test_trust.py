"""Whether only the bus writes a topic, from ACLs: the lake keeps the gateway's verdict on such a
topic only. No broker."""

from __future__ import annotations

from conveyor.acls.grants import Grant, Pattern, Resource
from conveyor.config import parse_platform
from conveyor.pipeline.fast_parse import jvm_blocker
from conveyor.pipeline.schema import contract_columns
from conveyor.pipeline.trust import as_read, grants_writing, judge, planned_trust

TOKEN = "0" * 64
SECURED = {"security.protocol": "SASL_SSL"}


def _write(principal: str, name: str, pattern: Pattern = Pattern.literal, operation: str = "WRITE") -> Grant:
    return Grant(principal, Resource.topic, name, pattern, operation)


def test_a_writer_is_named_by_the_topic_the_wildcard_or_a_prefix_and_writes_or_may_do_all():
    grants = {_write("User:a", "orders"), _write("User:b", "*"), _write("User:c", "ord", Pattern.prefixed),
              _write("User:d", "orders", operation="ALL"), _write("User:e", "orders", operation="READ"),
              _write("User:f", "orders-eu"), _write("User:g", "orders-", Pattern.prefixed),
              Grant("User:h", Resource.group, "orders", Pattern.literal, "WRITE")}
    assert grants_writing(grants, "orders") == {"User:a", "User:b", "User:c", "User:d"}


def test_trusted_only_where_every_cluster_lets_the_bus_alone_write():
    bus = {"User:conveyor-gateway", "User:conveyor-replicator"}
    assert judge("t", {"dc1": {"User:conveyor-gateway"}, "central": bus}).trusted
    assert judge("t", {"central": set()}).trusted  # nobody but the platform's super user
    mixed = judge("t", {"dc1": {"User:conveyor-gateway"}, "central": {*bus, "User:billing"}})
    assert not mixed.trusted and mixed.why == "User:billing may write it on cluster central; every record is checked in full"
    assert judge("t", {"dc1": {"User:*"}}).why.startswith("anyone may write it on cluster dc1")
    unknown = judge("t", {"dc1": bus, "central": "its ACLs could not be read (authorization failed)"})
    assert not unknown.trusted and unknown.why == "cluster central: its ACLs could not be read (authorization failed)"
    assert not judge("t", {}).trusted


def _platform(client: dict[str, str], **orders: object):
    return parse_platform({
        "clusters": {"dc1": {"role": "writable", "bootstrap": "dc1:9092", "client": client},
                     "central": {"role": "read", "bootstrap": "central:9092", "client": client}},
        "topics": {"orders": {"partitions": 2, "consumers": ["lake"], **orders}},
        "services": {s: {"token_sha256": TOKEN} for s in ("shop", "lake")},
        "routes": {"dc1-central": {"source": "dc1", "destination": "central", "topics": ["orders"]}},
    })


def test_config_check_s_answer_comes_from_the_acls_platform_yaml_asks_for():
    through_the_bus = planned_trust(_platform(SECURED, producers=["shop"]), "orders")
    assert through_the_bus.trusted and through_the_bus.why.startswith("only the bus writes it on central, dc1")
    direct = planned_trust(_platform(SECURED, producers=["shop"], direct_producers=["shop"]), "orders")
    assert not direct.trusted and "User:shop may write it on cluster" in direct.why
    open_cluster = planned_trust(_platform({}, producers=["shop"]), "orders")
    assert not open_cluster.trusted and "not secured (no authorizer)" in open_cluster.why


def test_a_contract_with_a_field_kept_as_json_text_is_checked_in_full_even_where_only_the_bus_writes():
    flat = contract_columns("orders", {"properties": {"id": {"type": "string"}, "n": {"type": "integer"}}})
    nested = contract_columns("orders", {"properties": {"id": {"type": "string"}, "cart": {"type": "object"},
                                                        "tags": {"type": "array"}}})
    assert jvm_blocker(flat) is None
    assert jvm_blocker(nested) == "its contract keeps cart, tags as JSON text, which only the full check renders"
    trusted = judge("orders", {"central": set()})
    assert as_read(trusted, jvm_blocker(flat)) == trusted
    blocked = as_read(trusted, jvm_blocker(nested))
    assert not blocked.trusted and blocked.why.endswith("as JSON text, which only the full check renders; "
                                                       "every record is checked in full")
    untrusted = judge("orders", {"central": {"User:*"}})
    assert as_read(untrusted, jvm_blocker(nested)) == untrusted  # the first reason stands
