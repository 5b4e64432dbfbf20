"""The ACLs of Conveyor's own parts, derived from the platform file, and the identity each part's
clients connect with. No broker."""

from __future__ import annotations

from conveyor import kafka, positions
from conveyor.acls import parts
from conveyor.acls.grants import Grant, Pattern
from conveyor.config import Part, Platform, RealtimeView, parse_platform
from conveyor.dispatch.share_reader import PRESENCE_GROUP
from conveyor.replicate import plan

TOKEN = "0" * 64


def _platform(**central: object):
    return parse_platform({
        "clusters": {"dc1": {"role": "writable", "bootstrap": "dc1:9092"},
                     "central": {"role": "read", "bootstrap": "central:9092", **central}},
        "topics": {"orders": {"partitions": 2, "producers": ["shop"], "consumers": ["lake", "billing"]}},
        "services": {s: {"token_sha256": TOKEN} for s in ("shop", "billing", "lake")},
        "routes": {"dc1-central": {"source": "dc1", "destination": "central", "topics": ["orders"]}},
    })


def _with_view(platform: Platform) -> Platform:
    """A view over orders (set after loading: the loader wants a contract file for a viewed topic)."""
    view = RealtimeView.model_validate({"topic": "orders", "group_by": ["shop_id"], "window": "1m",
                                        "metrics": {"orders": {}}})
    realtime = platform.pipeline.realtime.model_copy(update={"views": {"per_shop": view}})
    return platform.model_copy(update={"pipeline": platform.pipeline.model_copy(update={"realtime": realtime})})


def _of(grants: set[Grant], part: Part) -> set[tuple[str, str, Pattern, str]]:
    return {(g.resource.value, g.name, g.pattern, g.operation) for g in grants if g.principal == f"User:{part.user}"}


def test_the_names_granted_are_the_ones_the_parts_use():
    assert plan.route_topic("r").startswith(parts.ROUTE_TOPIC_PREFIX)
    assert plan.group_id("r").startswith(parts.REPLICATE_GROUP_PREFIX + "r")
    assert plan.transactional_id("r", 3).startswith(f"{parts.REPLICATE_GROUP_PREFIX}r-bucket-")
    assert PRESENCE_GROUP.format(group="g").startswith(parts.DISPATCH_NODES_GROUP_PREFIX)
    assert parts.feed_group("lake", "orders") == positions.group_name("lake", "orders")


def test_the_gateway_writes_produced_topics_on_writable_clusters_only():
    platform = _platform()
    grants = _of(parts.part_grants(platform, "dc1"), Part.gateway)
    assert grants == {("TOPIC", "orders", Pattern.literal, op) for op in ("WRITE", "DESCRIBE", "DESCRIBE_CONFIGS")}
    # On the read cluster, only the contract registry: it follows it and registers versions there.
    assert _of(parts.part_grants(platform, "central"), Part.gateway) == {
        *(("TOPIC", "_contracts", Pattern.literal, op) for op in ("READ", "WRITE", "DESCRIBE")),
        *(("TRANSACTIONAL_ID", "conveyor-registry", Pattern.literal, op) for op in ("WRITE", "DESCRIBE")),
        ("GROUP", "conveyor.registry.", Pattern.prefixed, "READ")}


def test_every_part_that_checks_copies_or_reads_events_follows_the_contract_registry_and_only_the_gateway_writes():
    grants = parts.part_grants(_platform(), "central")
    for part in (Part.replicator, Part.dispatcher, Part.lake, Part.realtime, Part.ops):
        assert {("TOPIC", "_contracts", Pattern.literal, op) for op in ("READ", "DESCRIBE")} <= _of(grants, part)
        assert ("TOPIC", "_contracts", Pattern.literal, "WRITE") not in _of(grants, part)
    assert not any(name == "_contracts" for _, name, *_ in _of(parts.part_grants(_platform(), "dc1"), Part.lake))


def test_the_replicator_reads_at_the_source_and_writes_transactionally_at_the_destination():
    platform = _platform()
    source = _of(parts.part_grants(platform, "dc1"), Part.replicator)
    assert ("TOPIC", "orders", Pattern.literal, "READ") in source
    assert not any(op == "WRITE" for *_, op in source)
    assert ("GROUP", "conveyor.replicate.dc1-central", Pattern.literal, "READ") in source
    destination = _of(parts.part_grants(platform, "central"), Part.replicator)
    assert {("TOPIC", "orders", Pattern.literal, op) for op in ("WRITE", "CREATE", "ALTER", "ALTER_CONFIGS")} <= destination
    assert ("TOPIC", "orders", Pattern.literal, "READ") not in destination
    assert ("TRANSACTIONAL_ID", "conveyor-replicate-dc1-central-bucket-", Pattern.prefixed, "WRITE") in destination
    assert ("TOPIC", "_conveyor_replicate_dc1-central", Pattern.literal, "READ") in destination
    # Nothing on any name it does not use: no wildcard without a pattern route.
    assert not any(name == "*" for _, name, *_ in source | destination)


def test_a_pattern_route_needs_every_topic_on_both_ends():
    platform = _platform().model_copy(update={"routes": {"all": parse_platform({
        "clusters": {"a": {"role": "writable"}, "b": {"role": "read"}},
        "routes": {"all": {"source": "a", "destination": "b", "pattern": "orders.*"}}}).routes["all"]
        .model_copy(update={"source": "dc1", "destination": "central"})}})
    assert ("TOPIC", "*", Pattern.literal, "READ") in _of(parts.part_grants(platform, "dc1"), Part.replicator)


def test_the_dispatcher_reads_in_its_consumers_groups_and_writes_their_dead_letters():
    grants = _of(parts.part_grants(_platform(), "central"), Part.dispatcher)
    assert ("GROUP", "billing", Pattern.literal, "READ") in grants
    assert ("GROUP", "billing.", Pattern.prefixed, "READ") in grants
    assert ("TOPIC", "orders.billing", Pattern.prefixed, "CREATE") in grants  # {topic}.{group}.dead
    assert ("GROUP", "conveyor-dispatch-nodes.", Pattern.prefixed, "READ") in grants
    assert ("TOPIC", "orders", Pattern.literal, "WRITE") not in grants
    assert ("GROUP", "conveyor.dispatch.", Pattern.prefixed, "READ") not in grants  # classic: its groups show


def test_the_share_dispatcher_publishes_to_its_monitoring_groups():
    platform = _platform()
    platform = platform.model_copy(update={"dispatch": platform.dispatch.model_copy(update={"backend": "share"})})
    grants = _of(parts.part_grants(platform, "central"), Part.dispatcher)
    assert ("GROUP", "conveyor.dispatch.", Pattern.prefixed, "READ") in grants
    assert positions.group_name("dispatch", "billing.x").startswith(parts.feed_group("dispatch", ""))


def test_the_pipelines_read_their_topics_on_the_read_cluster_and_the_audit_on_writable_ones():
    platform = _with_view(_platform())
    lake = _of(parts.part_grants(platform, "central"), Part.lake)
    # DESCRIBE on the cluster: it reads the ACLs to learn whether only the bus writes what it lands.
    assert lake == {("TOPIC", "orders", Pattern.literal, "READ"), ("TOPIC", "orders", Pattern.literal, "DESCRIBE"),
                    ("GROUP", "conveyor.lake.orders", Pattern.literal, "READ"),
                    ("BROKER", "kafka-cluster", Pattern.literal, "DESCRIBE"),
                    ("TOPIC", "_contracts", Pattern.literal, "READ"), ("TOPIC", "_contracts", Pattern.literal, "DESCRIBE"),
                    ("GROUP", "conveyor.registry.", Pattern.prefixed, "READ")}
    realtime = _of(parts.part_grants(platform, "central"), Part.realtime)
    assert ("TOPIC", "_realtime_rejects", Pattern.literal, "WRITE") in realtime
    assert ("GROUP", "conveyor.realtime.", Pattern.prefixed, "READ") in realtime
    # The audit counts what the gateways accepted in the writable clusters' logs; nothing else there.
    assert _of(parts.part_grants(platform, "dc1"), Part.lake) == {
        ("TOPIC", "orders", Pattern.literal, "READ"), ("TOPIC", "orders", Pattern.literal, "DESCRIBE"),
        ("BROKER", "kafka-cluster", Pattern.literal, "DESCRIBE")}
    assert not _of(parts.part_grants(platform, "dc1"), Part.realtime)


def test_ops_only_describes_except_the_route_topics_commit_records_its_evidence_and_the_throttles_quotas():
    grants = _of(parts.part_grants(_platform(), "dc1"), Part.ops)
    writes = {(r, n, op) for r, n, _, op in grants if op not in ("DESCRIBE", "DESCRIBE_CONFIGS")}
    assert writes == {("TOPIC", "_conveyor_replicate_", "READ"), ("TOPIC", "__consumer_offsets", "READ"),
                      *(("TOPIC", "_conveyor_ops_rewinds", op) for op in ("READ", "WRITE", "CREATE")),
                      ("BROKER", "kafka-cluster", "ALTER_CONFIGS")}


def test_every_part_with_a_grant_is_a_user_to_make():
    grants, users = parts.wanted(_with_view(_platform()), "central")
    assert {f"conveyor-{p.value}" for p in Part} <= users
    # shop sends through the bus: no credential of its own on Kafka.
    assert {"billing", "lake"} <= users and "shop" not in users and grants


def test_a_part_connects_with_its_own_credentials_and_others_with_the_clusters():
    platform = _platform(client={"security.protocol": "SASL_SSL", "sasl.username": "platform"},
                         credentials={"lake": {"sasl.username": "lake-writer", "sasl.password": "s3cret"}})
    assert kafka.client_config(platform, "central")["sasl.username"] == "platform"
    lake = kafka.client_config(platform.acting_as(Part.lake), "central")
    assert (lake["sasl.username"], lake["sasl.password"], lake["security.protocol"]) == ("lake-writer", "s3cret",
                                                                                          "SASL_SSL")
    assert kafka.client_config(platform.acting_as(Part.ops), "central")["sasl.username"] == "platform"

