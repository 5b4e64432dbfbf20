"""A local cluster with ``security: sasl_ssl``: SCRAM over TLS, Kafka's authorizer, nothing allowed
without an ACL, and the principals and ACLs that `conveyor acl apply` derives from platform.yaml.
The refusals are checked with plain confluent-kafka clients built here, not with Conveyor's
factories, so that what is proved is that the broker refuses."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, UserScramCredentialUpsertion, ScramCredentialInfo, ScramMechanism

from conveyor import kafka
import yaml

from conveyor.config import Platform, load_platform
from conveyor.config.resolved import resolved_view_file
from conveyor.acls.parts import part_grants
from conveyor.runtime.local import LocalPlatform
from conveyor.runtime.security import local_security
from tests.conftest import base_port, demo_event

pytestmark = pytest.mark.integration

PORT = int(os.environ.get("CONVEYOR_TEST_SECURE_PORT", base_port() - 600))


SHOP_TOKEN = "shop-token"
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def platform_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two services: shop writes orders (through a gateway, and on Kafka itself), billing reads them
    and writes invoices on Kafka."""
    folder = tmp_path_factory.mktemp("secured")
    shutil.copytree(ROOT / "contracts", folder / "contracts")
    path = folder / "platform.yaml"
    path.write_text(yaml.safe_dump({
        "name": "secured-test",
        "runtime": {"home": str(folder / "home"), "base_port": PORT, "start_timeout": 300,
                    "redis": {"enabled": False}},
        "clusters": {"vault": {"role": "writable", "brokers": 2, "security": "sasl_ssl"}},
        "topics": {"orders": {"partitions": 2, "producers": ["shop"], "direct_producers": ["shop"],
                              "consumers": ["billing"], "contract": "contracts/ad-events.schema.json"},
                   "invoices": {"partitions": 1, "direct_producers": ["billing"]}},
        "services": {"shop": {"token_sha256": hashlib.sha256(SHOP_TOKEN.encode()).hexdigest()},
                     "billing": {"token_sha256": "0" * 64}},
    }))
    return path


@pytest.fixture(scope="module")
def secured(platform_path: Path) -> Iterator[Platform]:
    local = LocalPlatform(load_platform(platform_path))
    try:
        local.up()
        yield local.clients
    finally:
        local.down()


def _conveyor(platform_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "conveyor", *args, "--platform", str(platform_path)],
                          capture_output=True, text=True, timeout=120)


def _plain(platform: Platform, **settings: str) -> dict[str, str]:
    """A client's settings from scratch: the broker's address and what the test gives."""
    return {"bootstrap.servers": platform.bootstrap("vault"), "socket.timeout.ms": "5000",
            "log_level": "0", **settings}


def _scram(platform: Platform, user: str, password: str) -> dict[str, str]:
    return _plain(platform, **{"security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512",
                               "sasl.username": user, "sasl.password": password,
                               "ssl.ca.location": str(local_security(platform.home).ca_cert)})


def _end_offsets(platform: Platform, topic: str) -> dict[int, int]:
    consumer = kafka.consumer(platform, "vault", f"ends-{uuid.uuid4().hex[:6]}", "test-ends")
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(2)}
    finally:
        consumer.close()


@pytest.fixture(scope="module")
def topic(secured: Platform) -> str:
    """A topic with one record, written by the platform's admin principal through Conveyor's factories."""
    name = f"secret-{uuid.uuid4().hex[:6]}"
    admin = kafka.admin(secured, "vault")
    admin.create_topics([NewTopic(name, 2, 1)])[name].result(30)
    producer = kafka.producer(secured, "vault", "test-admin-writer")
    producer.produce(name, b"first", partition=0)
    assert producer.flush(30) == 0
    return name


@pytest.fixture(scope="module")
def stranger(secured: Platform) -> tuple[str, str]:
    """A SCRAM user the broker knows, with no ACL at all."""
    user, password = "stranger", uuid.uuid4().hex
    admin = kafka.admin(secured, "vault")
    upsert = UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                                          password.encode())
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(30)
    return user, password


def test_the_platform_admin_writes_and_reads_over_sasl_ssl(secured: Platform, topic: str):
    consumer = kafka.consumer(secured, "vault", f"admin-{uuid.uuid4().hex[:6]}", "test-admin-reader")
    consumer.assign([TopicPartition(topic, 0, 0)])
    try:
        message = consumer.poll(30)
        assert message is not None and message.error() is None and message.value() == b"first"
    finally:
        consumer.close()


def test_a_client_without_credentials_cannot_even_list_topics(secured: Platform, topic: str):
    for settings in (_plain(secured), _plain(secured, **{"security.protocol": "SSL",
                                                           "ssl.ca.location": str(local_security(secured.home).ca_cert)})):
        with pytest.raises(KafkaException) as failure:
            AdminClient(settings).list_topics(timeout=5)
        assert failure.value.args[0].code() in (KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN)


def test_a_wrong_password_is_refused(secured: Platform, topic: str):
    errors: list[KafkaError] = []
    settings = _scram(secured, "admin", "not-the-password")
    admin = AdminClient({**settings, "error_cb": errors.append})
    with pytest.raises(KafkaException) as failure:
        admin.list_topics(timeout=5)
    admin.poll(1)  # serves the error callback
    codes = {failure.value.args[0].code(), *(e.code() for e in errors)}
    assert KafkaError._AUTHENTICATION in codes, (failure.value, errors)


def test_a_user_without_acls_cannot_write_or_read_and_nothing_is_written(
        secured: Platform, topic: str, stranger: tuple[str, str]):
    before = _end_offsets(secured, topic)
    reports: list[KafkaError | None] = []
    producer = Producer({**_scram(secured, *stranger), "message.timeout.ms": "10000"})
    producer.produce(topic, b"intruder", partition=1, on_delivery=lambda err, _msg: reports.append(err))
    producer.flush(20)
    assert [e.code() if e else None for e in reports] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]

    consumer = Consumer({**_scram(secured, *stranger), "group.id": "stranger-group", "enable.auto.commit": "false"})
    consumer.subscribe([topic])
    try:
        message = consumer.poll(15)
        assert message is not None and message.error() is not None
        assert message.error().code() in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED)
    finally:
        consumer.close()
    assert _end_offsets(secured, topic) == before


def test_secrets_are_files_only_their_owner_reads(secured: Platform):
    material = local_security(secured.home)
    for path in (material.ca_key, material.node_keystore, material.secrets_file, resolved_view_file(secured)):
        assert Path(path).stat().st_mode & 0o077 == 0, path


@pytest.fixture(scope="module")
def provisioned(secured: Platform, platform_path: Path) -> Platform:
    """`up` made the users and ACLs platform.yaml declares; `topics apply` creates the topics (and
    would grant what a newly declared topic needs)."""
    run = _conveyor(platform_path, "topics", "apply")
    assert run.returncode == 0, run.stdout + run.stderr
    return secured


def _service(platform: Platform, service: str) -> dict[str, str]:
    return _scram(platform, service, local_security(platform.home).service_password(service))


def _plan(platform_path: Path) -> tuple[int, list[dict]]:
    run = _conveyor(platform_path, "acl", "plan", "-o", "json")
    assert run.returncode in (0, 2), run.stdout + run.stderr
    return run.returncode, json.loads(run.stdout)["changes"]


def test_acl_apply_gives_each_service_exactly_its_topics(provisioned: Platform):
    reports: list[tuple[str, KafkaError | None]] = []
    producer = Producer({**_service(provisioned, "shop"), "message.timeout.ms": "10000"})
    for topic in ("orders", "invoices"):
        producer.produce(topic, b"x", partition=0, on_delivery=lambda err, msg: reports.append((msg.topic(), err)))
    producer.flush(20)
    codes = {topic: err.code() if err else None for topic, err in reports}
    assert codes == {"orders": None, "invoices": KafkaError.TOPIC_AUTHORIZATION_FAILED}

    # billing reads orders in a group of its own prefix, and cannot use another service's group.
    for group, expected in (("billing.invoicer", None), ("shop.spy", KafkaError.GROUP_AUTHORIZATION_FAILED)):
        consumer = Consumer({**_service(provisioned, "billing"), "group.id": group, "enable.auto.commit": "false",
                             "auto.offset.reset": "earliest"})
        consumer.subscribe(["orders"])
        try:
            message = consumer.poll(20)
            while message is not None and message.error() is None and expected is not None:
                message = consumer.poll(5)
            assert message is not None
            assert (message.error().code() if message.error() else None) == expected, message.error()
        finally:
            consumer.close()


def test_acl_plan_shows_an_acl_removed_by_hand_and_apply_restores_it(provisioned: Platform, platform_path: Path):
    assert _plan(platform_path) == (0, [{"cluster": "vault", "principal": None, "change": "in sync", "detail": None}])
    from confluent_kafka.admin import AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    admin = kafka.admin(provisioned, "vault")
    removed = AclBindingFilter(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:shop", "*",
                               AclOperation.WRITE, AclPermissionType.ALLOW)
    for future in admin.delete_acls([removed]).values():
        future.result(15)
    code, changes = _plan(platform_path)
    assert code == 2
    assert changes == [{"cluster": "vault", "principal": "User:shop", "change": "add", "detail": "WRITE on topic orders"}]
    assert _conveyor(platform_path, "acl", "apply").returncode == 0
    assert _plan(platform_path)[0] == 0


def test_acl_apply_resets_the_passwords_of_a_lost_principals_file(provisioned: Platform, platform_path: Path):
    """principals.json lost: each part gets a new password the cluster does not know, so it is
    locked out; `acl apply --reset-passwords` sets the cluster's users to the passwords held now."""
    material = local_security(provisioned.home)
    old = material.service_password("billing")
    known = json.loads(material.principals_file.read_text())
    del known["billing"]
    material.principals_file.write_text(json.dumps(known))
    new = material.service_password("billing")
    assert new != old and material.principals_file.stat().st_mode & 0o077 == 0  # written anew, owner-only
    with pytest.raises(KafkaException):
        AdminClient(_scram(provisioned, "billing", new)).list_topics(timeout=5)
    assert _conveyor(platform_path, "acl", "apply").returncode == 0  # creates missing users only: still out
    with pytest.raises(KafkaException):
        AdminClient(_scram(provisioned, "billing", new)).list_topics(timeout=5)
    reset = _conveyor(platform_path, "acl", "apply", "--reset-passwords")
    assert reset.returncode == 0, reset.stdout + reset.stderr
    assert "orders" in AdminClient(_scram(provisioned, "billing", new)).list_topics(timeout=10).topics
    with pytest.raises(KafkaException):
        AdminClient(_scram(provisioned, "billing", old)).list_topics(timeout=5)


def test_no_log_holds_a_password(provisioned: Platform):
    """After everything above ran: the brokers' logs, their data (the metadata log keeps SCRAM
    credentials salted) and anything else under the runtime home, outside the secrets' own files
    (the resolved view among them) and the nodes' configuration, never show the admin's or a service's password."""
    material = local_security(provisioned.home)
    secrets = [material.admin_password, material.keystore_password,
               *(material.service_password(s) for s in ("shop", "billing"))]
    kept = {material.secrets_file, material.principals_file, material.node_keystore, material.ca_key,
            material.server_key, resolved_view_file(provisioned)}
    logs = [p for p in provisioned.home.rglob("*") if p.is_file() and p not in kept and p.name != "server.properties"]
    assert any(p.suffix == ".log" for p in logs), logs
    leaked = [str(p) for p in logs if any(s.encode() in p.read_bytes() for s in secrets)]
    assert leaked == []


def _post(url: str, count: int) -> httpx.Response:
    return httpx.post(f"{url}/v1/topics/orders/events", content=orjson.dumps([demo_event() for _ in range(count)]),
                      headers={"Authorization": f"Bearer {SHOP_TOKEN}", "Content-Type": "application/json"},
                      timeout=60)


def test_the_gateway_writes_as_its_own_principal_and_only_what_its_acls_allow(
        provisioned: Platform, platform_path: Path, serve_gateway):
    """Its grants are derived from the file (WRITE on produced topics and the audit); take its WRITE
    on orders away by hand and its writes are refused, with nothing written, although the platform's
    admin could still write: the gateway is not the admin."""
    gateway_write = [g for g in part_grants(provisioned, "vault")
                     if g.principal == "User:conveyor-gateway" and g.name == "orders" and g.operation == "WRITE"]
    assert len(gateway_write) == 1
    url = serve_gateway(provisioned, "vault")
    before = _end_offsets(provisioned, "orders")
    assert _post(url, 20).status_code == 200
    landed = _end_offsets(provisioned, "orders")
    assert sum(landed.values()) - sum(before.values()) == 20

    from confluent_kafka.admin import AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    admin = kafka.admin(provisioned, "vault")
    for future in admin.delete_acls([AclBindingFilter(
            ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:conveyor-gateway", "*",
            AclOperation.WRITE, AclPermissionType.ALLOW)]).values():
        assert len(future.result(15)) == 1
    refused = _post(url, 5)
    assert refused.status_code >= 400, refused.text
    assert _end_offsets(provisioned, "orders") == landed
    assert _conveyor(platform_path, "acl", "apply").returncode == 0
    assert _post(url, 5).status_code == 200
    assert sum(_end_offsets(provisioned, "orders").values()) - sum(landed.values()) == 5
