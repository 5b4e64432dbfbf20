"""The ACLs and SCRAM users platform.yaml asks for, and the difference to a cluster's. No broker."""

from __future__ import annotations

from conveyor.acls.grants import Grant, Pattern, Resource, is_secured, wanted_grants, wanted_users
from conveyor.acls.plan import plan_acls
from conveyor.config import parse_platform

TOKEN = "0" * 64


def _platform(**cluster: object):
    return parse_platform({
        "clusters": {"vault": {"role": "read", **cluster}, "open": {"role": "writable"}},
        "topics": {"orders": {"partitions": 2, "direct_producers": ["shop"], "consumers": ["billing", "search"]},
                   "invoices": {"partitions": 1, "direct_producers": ["billing"], "clusters": ["vault"]},
                   "clicks": {"partitions": 1, "producers": ["web"], "clusters": ["vault"]}},
        "services": {s: {"token_sha256": TOKEN} for s in ("shop", "billing", "search", "web")},
    })


def test_direct_producers_write_consumers_read_and_each_consumer_owns_a_group_prefix():
    """A producer through the bus (web) gets nothing on Kafka: the gateway writes for it."""
    grants = wanted_grants(_platform(security="sasl_ssl"), "vault")
    topic = {(g.principal, g.name, g.operation) for g in grants if g.resource == Resource.topic}
    assert topic == {("User:shop", "orders", "WRITE"), ("User:shop", "orders", "DESCRIBE"),
                     ("User:billing", "orders", "READ"), ("User:billing", "orders", "DESCRIBE"),
                     ("User:search", "orders", "READ"), ("User:search", "orders", "DESCRIBE"),
                     ("User:billing", "invoices", "WRITE"), ("User:billing", "invoices", "DESCRIBE")}
    groups = {(g.principal, g.name, g.pattern) for g in grants if g.resource == Resource.group}
    assert groups == {("User:billing", "billing.", Pattern.prefixed), ("User:search", "search.", Pattern.prefixed)}
    # A topic the cluster does not carry grants nothing there.
    assert not any(g.name == "invoices" for g in wanted_grants(_platform(security="sasl_ssl"), "open"))


def test_users_are_the_services_that_use_the_clusters_topics_on_kafka():
    assert wanted_users(_platform(security="sasl_ssl"), "vault") == {"shop", "billing", "search"}
    assert wanted_users(_platform(security="sasl_ssl"), "open") == {"shop", "billing", "search"}


def test_a_cluster_is_secured_by_its_client_settings():
    assert not is_secured(_platform().clusters["vault"])
    assert not is_secured(_platform(bootstrap="k:9093", client={"security.protocol": "SSL"}).clusters["vault"])
    existing = _platform(bootstrap="k:9093", client={"security.protocol": "sasl_ssl", "sasl.mechanisms": "PLAIN"})
    assert is_secured(existing.clusters["vault"])


def test_the_plan_adds_what_is_missing_and_removes_only_with_prune_and_never_the_super_user():
    wanted = {Grant("User:shop", Resource.topic, "orders", Pattern.literal, "WRITE")}
    stray = Grant("User:old", Resource.topic, "orders", Pattern.literal, "READ")
    admin = Grant("User:admin", Resource.topic, "orders", Pattern.literal, "ALL")
    plan = plan_acls("vault", wanted, {stray, admin}, {"shop"}, set())
    assert (plan.add, plan.remove, plan.users) == (tuple(wanted), (), ("shop",))
    pruned = plan_acls("vault", wanted, {stray, admin, *wanted}, {"shop"}, {"shop"}, prune=True,
                       keep=frozenset({"User:admin"}))
    assert (pruned.add, pruned.remove, pruned.users) == ((), (stray,), ())
    assert plan_acls("vault", wanted, set(wanted), set(), set()).in_sync
